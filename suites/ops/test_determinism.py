"""Determinism: ops documented as deterministic give bit-identical results run to run.

Each row of :data:`DETERMINISTIC` builds inputs once (CPU, seeded), runs the op twice on
the DUT (inside ``device.scope()``) and counts the elements whose *bits* differ. Rows
marked ``flag`` are deterministic only under ``torch.use_deterministic_algorithms(True)``
(PyTorch's docs list index_add, scatter_add and convolution backward among the ops that
need it on accelerators); the flag is set around both runs and restored afterwards.
One record per (op, dtype): ``mismatched`` elements, rule ``equal``.
"""

import contextlib
import dataclasses
from typing import Callable

import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - torch's own convention

from harness import dtypes as dt
from harness import ids
from harness.results import equal

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
        torch.float64: torch.int64}


@dataclasses.dataclass(frozen=True)
class Row:
    """One deterministic op: inputs from a generator, the computation, whether it needs
    ``use_deterministic_algorithms``, and whether the compared values are gradients."""

    name: str
    inputs: Callable[[torch.Generator], list]
    run: Callable[..., object]
    flag: bool = False
    backward: bool = False


def _randn(gen, *shape):
    return torch.randn(*shape, generator=gen)


def _idx(gen, high, *shape):
    return torch.randint(0, high, shape, generator=gen)


def _conv_wgrad(x, w):
    w = w.detach().requires_grad_(True)
    out = F.conv2d(x, w, padding=1)
    (grad,) = torch.autograd.grad(out, w, torch.ones_like(out))
    return grad


def _linear_grads(x, w):
    x, w = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    out = F.linear(x, w)
    return torch.autograd.grad(out, (x, w), torch.ones_like(out))


DETERMINISTIC: tuple[Row, ...] = (
    Row("mm", lambda g: [_randn(g, 256, 384), _randn(g, 384, 192)], torch.mm),
    Row("bmm", lambda g: [_randn(g, 8, 64, 96), _randn(g, 8, 96, 48)], torch.bmm),
    Row("conv2d_fwd", lambda g: [_randn(g, 4, 16, 32, 32), _randn(g, 32, 16, 3, 3)],
        lambda x, w: F.conv2d(x, w, padding=1)),
    Row("conv2d_wgrad", lambda g: [_randn(g, 4, 16, 32, 32), _randn(g, 32, 16, 3, 3)],
        _conv_wgrad, flag=True, backward=True),
    Row("linear_bwd", lambda g: [_randn(g, 128, 256), _randn(g, 64, 256)], _linear_grads,
        backward=True),
    Row("softmax", lambda g: [_randn(g, 64, 1000)], lambda x: torch.softmax(x, -1)),
    Row("log_softmax", lambda g: [_randn(g, 64, 1000)], lambda x: torch.log_softmax(x, -1)),
    Row("sum", lambda g: [_randn(g, 1 << 20)], torch.sum),
    Row("mean_dim", lambda g: [_randn(g, 256, 1024)], lambda x: x.mean(dim=0)),
    Row("cumsum", lambda g: [_randn(g, 64, 4096)], lambda x: torch.cumsum(x, -1)),
    Row("layer_norm", lambda g: [_randn(g, 128, 768)], lambda x: F.layer_norm(x, (768,))),
    Row("index_select", lambda g: [_randn(g, 1000, 64), _idx(g, 1000, 4096)],
        lambda x, i: torch.index_select(x, 0, i)),
    Row("gather", lambda g: [_randn(g, 128, 512), _idx(g, 512, 128, 256)],
        lambda x, i: torch.gather(x, 1, i)),
    Row("index_add", lambda g: [_randn(g, 100, 64), _idx(g, 100, 4096), _randn(g, 4096, 64)],
        lambda x, i, s: x.index_add(0, i, s), flag=True),
    Row("scatter_add", lambda g: [_randn(g, 64, 100), _idx(g, 100, 64, 2048),
                                  _randn(g, 64, 2048)],
        lambda x, i, s: x.scatter_add(1, i, s), flag=True),
)


@contextlib.contextmanager
def deterministic_algorithms(enabled: bool):
    """``torch.use_deterministic_algorithms`` for the block; the previous state after."""
    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    if enabled:
        torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_only)


def _tensors(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value.detach().cpu()]
    return [t for v in value for t in _tensors(v)]


def bit_mismatches(first: list, second: list) -> tuple[int, int]:
    """(elements whose bits differ, elements compared) between two runs' tensors."""
    bad = total = 0
    for a, b in zip(first, second):
        total += a.numel()
        if a.shape != b.shape or a.dtype != b.dtype:
            bad += a.numel()
            continue
        view = BITS.get(a.dtype)
        left, right = (a.contiguous().view(view), b.contiguous().view(view)) if view else (a, b)
        bad += int((left != right).sum())
    return bad, total


@pytest.mark.parametrize("dtype", DTYPES, ids=dt.ids)
@pytest.mark.parametrize("row", DETERMINISTIC, ids=lambda r: r.name)
def test_two_runs_are_bit_identical(row, dtype, device, results):
    gen = torch.Generator().manual_seed(1234)
    cpu_inputs = [t.to(dtype) if t.is_floating_point() else t for t in row.inputs(gen)]
    outputs = []
    with deterministic_algorithms(row.flag):
        for _ in range(2):
            with device.scope():
                inputs = [t.to(device.torch_device) for t in cpu_inputs]
                outputs.append(_tensors(row.run(*inputs)))
                device.synchronize()
    mismatched, numel = bit_mismatches(*outputs)
    name = dt.name(dtype)
    what = "gradients" if row.backward else "outputs"
    results.check(
        ids.record("determinism", row.name, name), not mismatched,
        f"{row.name} ({name}, {device.type}): two runs on the same inputs differ in "
        f"{mismatched} of {numel} {what} (bitwise); documented deterministic"
        f"{' with use_deterministic_algorithms(True)' if row.flag else ''}",
        metrics={"mismatched": mismatched, "numel": numel},
        rules={"mismatched": equal(abs=0)},
        info={"deterministic_algorithms": row.flag})
