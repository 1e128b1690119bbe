"""The harness measures the DUT as it runs without the harness (Note [Measured without
the harness] in harness/ops/policy.py): the aten-op recording is a second execution, so
the outputs that are judged are the ones the DUT gives with no dispatch mode around it.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from harness.device import select
from harness.ops import CATALOG, policy
from harness.ops.runner import _execute, run_case
from harness.ops.spec import DTYPES, case_seed, materialize

DEVICE = select("cpu")[0]


def _flat(outs, grads) -> list:
    tensors = [t for _, t in outs] + list(grads or [])
    return [t.detach() if isinstance(t, torch.Tensor) else t for t in tensors]


def _bit_equal(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(torch.equal(a.isnan(), b.isnan())
                    and torch.equal(torch.nan_to_num(a, 0.0), torch.nan_to_num(b, 0.0))
                    and torch.equal(a.signbit(), b.signbit()))
    return bool(torch.equal(a, b))


def _one(entry, dtype: str, sample, noting: bool):
    """The DUT's outputs and input gradients for one case: plain (inside the DUT scope
    only) or through :func:`policy.run_dut` (measured, then noted)."""
    values = materialize(sample, dtype, torch.Generator().manual_seed(
        case_seed(0, entry.name, dtype, sample.name)))
    torch_dtype = DTYPES[dtype]
    is_float = torch_dtype.is_floating_point
    backward = entry.backward and is_float
    cot = torch.Generator().manual_seed(1)

    def call(seen):
        torch.manual_seed(7)  # random ops draw the same numbers in both executions
        return _execute(entry, values, sample, DEVICE.torch_device,
                        torch_dtype if is_float else None, backward, None,
                        torch.Generator().manual_seed(cot.initial_seed()), seen)

    if not noting:
        with DEVICE.scope():
            outs, grads, _ = call(None)
        return _flat(outs, grads), None
    seen = policy.Watch(phase=None)
    outs, grads, _ = policy.run_dut(DEVICE, call, seen)
    return _flat(outs, grads), seen


def _is_no_op(entry, dtype: str) -> bool:
    return entry.name == f"to_{dtype}"


ENTRIES = [pytest.param(e, id=e.name) for e in CATALOG if e.judge is None]


@pytest.mark.parametrize("entry", ENTRIES)
def test_recording_leaves_every_catalog_output_as_it_is(entry):
    """For every catalog op and each of its dtypes (the first default-run sample), the
    outputs and gradients of the recorded run are bit-identical to the DUT's without the
    harness, and the recording still names the aten ops."""
    sample = next(s for s in entry.samples if not s.slow)
    for dtype in entry.dtypes:
        try:
            plain, _ = _one(entry, dtype, sample, noting=False)
        except Exception as exc:  # noqa: BLE001 - no kernel here: the recorded run raises too
            with pytest.raises(type(exc)):
                _one(entry, dtype, sample, noting=True)
            continue
        recorded, seen = _one(entry, dtype, sample, noting=True)
        assert len(plain) == len(recorded)
        different = [i for i, (a, b) in enumerate(zip(plain, recorded)) if not _bit_equal(a, b)]
        assert not different, f"{entry.name} {dtype}: outputs {different} differ when recorded"
        noted = seen.aten_ops["fwd"]
        if _is_no_op(entry, dtype):  # x.to(its own dtype) returns x: nothing is dispatched
            assert not noted
        else:
            assert noted, f"{entry.name} {dtype}: no aten op noted"


def test_the_measured_call_runs_under_no_dispatch_mode():
    modes = []

    def call(seen):
        modes.append(_get_current_dispatch_mode())
        return torch.ones(2).cumprod(0)

    seen = policy.Watch()
    policy.run_dut(DEVICE, call, seen)
    assert modes[0] is None, "the measured execution ran under a dispatch mode"
    assert modes[1] is not None, "the noting execution recorded nothing"
    assert seen.aten_ops["fwd"] == {"aten.cumprod", "aten.ones"}


def test_a_failing_dut_call_raises_and_still_names_its_ops():
    def call(seen):
        x = torch.ones(2).exp()
        raise RuntimeError(f"no kernel after {x.shape}")

    seen = policy.Watch()
    with pytest.raises(RuntimeError, match="no kernel"):
        policy.run_dut(DEVICE, call, seen)
    assert "aten.exp" in seen.aten_ops["fwd"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cumprod_backward_is_judged_as_measured(dtype):
    """The case a dispatch mode used to change (torch's subclass-safe cumprod_backward on
    torch 2.1, 2.4 and 2.5): it passes on a correct CPU on every torch line."""
    entry = next(e for e in CATALOG if e.name == "cumprod")
    for sample in (s for s in entry.samples if not s.slow):
        for outcome in run_case(DEVICE, entry, dtype, sample):
            assert outcome.status == "pass", outcome.message
            assert "aten.cumprod" in outcome.info["aten_ops"]["fwd"]
