"""The one generic runner: a catalog case on the DUT against its CPU references.

:func:`run_case` takes a :class:`~harness.device.Device` and plain values (an entry, a
dtype name, a sample, a seed), builds the inputs with a seeded generator, runs the op
forward and backward inside ``device.scope()``, runs the up-cast reference and the
low-precision reference outside it, and returns one :class:`Outcome` per direction
(``fwd``, ``bwd``) with a :class:`~harness.compare.Verdict` per output / input gradient.

Ids (stable across runs and torch versions: built from catalog names only):
case id ``<op>-<dtype>-<fwd|bwd>-<sample>`` (what ``--op-filter`` matches) and record id
``ops/<op>/<dtype>/<fwd|bwd>/<sample>``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Optional

import torch

from harness.compare import Verdict, compare_outputs
from harness.device import missing_kernel
from harness.ops.spec import DTYPES, UPCAST, OpEntry, Sample, T, case_seed, materialize

DIRECTIONS = ("fwd", "bwd")


def case_id(op: str, dtype: str, direction: str, sample: str) -> str:
    return f"{op}-{dtype}-{direction}-{sample}"


def record_id(op: str, dtype: str, direction: str, sample: str) -> str:
    return f"ops/{op}/{dtype}/{direction}/{sample}"


def filter_regex(case: str) -> str:
    """An ``--op-filter`` value that selects exactly one case id."""
    return "^" + re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", case) + "$"


@dataclasses.dataclass
class Outcome:
    """One direction of one case: a verdict per output (fwd) or input gradient (bwd)."""

    op: str
    dtype: str
    direction: str
    sample: str
    status: str = "pass"                  # pass | fail | error | unsupported
    verdicts: dict[str, Verdict] = dataclasses.field(default_factory=dict)
    error: str = ""

    @property
    def case_id(self) -> str:
        return case_id(self.op, self.dtype, self.direction, self.sample)

    @property
    def record_id(self) -> str:
        return record_id(self.op, self.dtype, self.direction, self.sample)

    def metrics(self) -> dict[str, float]:
        single = len(self.verdicts) == 1
        out: dict[str, float] = {}
        for label, verdict in self.verdicts.items():
            for key, value in verdict.metrics.items():
                out[key if single else f"{label}.{key}"] = value
        return out

    def rules(self) -> dict:
        single = len(self.verdicts) == 1
        out: dict = {}
        for label, verdict in self.verdicts.items():
            for key, rule in verdict.rules.items():
                out[key if single else f"{label}.{key}"] = rule
        return out

    def message(self) -> str:
        if self.error:
            return self.error
        parts = [f"[{label}] {v.message}"
                 for label, v in self.verdicts.items() if not v.passed]
        return "\n".join(parts)


# --------------------------------------------------------------------------- helpers

def _labelled(out: Any) -> list[tuple[str, Optional[torch.Tensor]]]:
    """An op's result as (label, tensor) pairs: ``out``, or ``out0``, ``out1``... by position."""
    if isinstance(out, torch.Tensor):
        return [("out", out)]
    if isinstance(out, (tuple, list)):
        # by position, not by field name: torch.return_types expose their names only on
        # some Python versions, and metric names must not change with the interpreter
        return [(f"out{index}", item) for index, item in enumerate(out)
                if isinstance(item, torch.Tensor) or item is None]
    raise TypeError(f"op returned {type(out).__name__}, expected a tensor or a tuple of them")


def _prepare(values: list, specs: tuple, device: torch.device, float_dtype: Optional[torch.dtype],
             want_grad: bool) -> tuple[list, list[torch.Tensor]]:
    """Copy materialized values to ``device`` (floats to ``float_dtype``), mark grad leaves."""
    leaves: list[torch.Tensor] = []

    def one(value: torch.Tensor, spec: Any) -> torch.Tensor:
        cast = float_dtype if (isinstance(spec, T) and spec.dtype is None
                               and value.is_floating_point() and float_dtype is not None) else None
        tensor = value.to(device=device, dtype=cast or value.dtype, copy=True)
        if want_grad and isinstance(spec, T) and spec.grad and tensor.is_floating_point():
            tensor.requires_grad_(True)
            leaves.append(tensor)
        return tensor

    def walk(value: Any, spec: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return one(value, spec)
        if isinstance(value, (list, tuple)):
            return type(value)(walk(v, s) for v, s in zip(value, spec))
        return value

    args = [walk(value, spec) for value, spec in zip(values, specs)]
    return args, leaves


def _status_of(exc: BaseException) -> str:
    if isinstance(exc, NotImplementedError) or missing_kernel(exc):
        return "unsupported"
    return "error"


def _differentiable(outs: list[tuple[str, Optional[torch.Tensor]]]) -> list[torch.Tensor]:
    return [t for _, t in outs if t is not None and t.requires_grad and t.is_floating_point()]


def _grads(outs: list[torch.Tensor], leaves: list[torch.Tensor],
           grad_outputs: list[torch.Tensor]) -> list[Optional[torch.Tensor]]:
    if not outs or not leaves:
        return [None] * len(leaves)
    return list(torch.autograd.grad(outs, leaves, grad_outputs, allow_unused=True))


def _execute(entry: OpEntry, values: list, sample: Sample, device: torch.device,
             float_dtype: Optional[torch.dtype], backward: bool,
             grad_outputs: Optional[list[torch.Tensor]], gen: Optional[torch.Generator]):
    """Forward (+ backward) of one execution; makes grad_outputs from ``gen`` if not given."""
    args, leaves = _prepare(values, sample.args, device, float_dtype, backward)
    outs = _labelled(entry.fn(*args, **sample.kwargs))
    grads: Optional[list] = None
    if backward:
        diff = _differentiable(outs)
        if grad_outputs is None:
            grad_outputs = [torch.randn(t.shape, generator=gen).to(t.dtype) for t in diff]
        gos = [g.to(device=device, dtype=t.dtype) for g, t in zip(grad_outputs, diff)]
        grads = _grads(diff, leaves, gos)
    return outs, grads, grad_outputs


def _grad_labels(sample: Sample) -> list[str]:
    labels = []
    for index, spec in enumerate(sample.args):
        specs = spec if isinstance(spec, (list, tuple)) and spec and isinstance(spec[0], T) else [spec]
        for sub, one in enumerate(specs):
            if isinstance(one, T) and one.grad:
                labels.append(f"grad{index}" if len(specs) == 1 else f"grad{index}_{sub}")
    return labels


# ---------------------------------------------------------------------------- runner

def run_case(device, entry: OpEntry, dtype: str, sample: Sample, seed: int = 0,
             directions: tuple[str, ...] = DIRECTIONS) -> list[Outcome]:
    """Run one case (op x dtype x sample) and judge it; never raises for op failures.

    Args:
        device: the :class:`~harness.device.Device` under test.
        entry, dtype, sample: the catalog row, a dtype name from ``entry.dtypes``, and one
            of ``entry.samples``.
        seed: the global seed; inputs are drawn from ``case_seed(seed, op, dtype, sample)``.
        directions: which of ``fwd``/``bwd`` to report (``bwd`` only where the entry and
            the dtype have a backward).
    Returns:
        One :class:`Outcome` per reported direction.
    """
    gen = torch.Generator().manual_seed(case_seed(seed, entry.name, dtype, sample.name))
    torch_dtype = DTYPES[dtype]
    is_float = torch_dtype.is_floating_point
    backward = entry.backward and is_float and "bwd" in directions
    wanted = [d for d in directions if d == "fwd" or backward]
    outcomes = {d: Outcome(entry.name, dtype, d, sample.name) for d in wanted}
    if not outcomes:
        return []
    values = materialize(sample, dtype, gen)
    if entry.judge is not None:
        return entry.judge(device, entry, dtype, sample, values, gen, outcomes)

    # ---- the DUT (faults act here)
    try:
        with device.scope():
            dut_outs, dut_grads, grad_outputs = _execute(
                entry, values, sample, device.torch_device, torch_dtype if is_float else None,
                backward, None, gen)
            device.synchronize()
    except Exception as exc:  # noqa: BLE001 - a failing DUT op is a record, not a crash
        status = _status_of(exc)
        for outcome in outcomes.values():
            outcome.status = status
            outcome.error = f"DUT raised {type(exc).__name__}: {exc}"
        return list(outcomes.values())

    # ---- the references (never in scope)
    cpu = torch.device("cpu")
    up = DTYPES[UPCAST[dtype]] if is_float else None
    try:
        ref_outs, ref_grads, _ = _execute(entry, values, sample, cpu, up, backward,
                                          grad_outputs, None)
    except Exception as exc:  # noqa: BLE001
        for outcome in outcomes.values():
            outcome.status = "error"
            outcome.error = (f"the up-cast CPU reference ({UPCAST.get(dtype, dtype)}) raised "
                             f"{type(exc).__name__}: {exc}")
        return list(outcomes.values())
    low_outs: Optional[list] = None
    low_grads: Optional[list] = None
    if is_float:
        try:
            low_outs, low_grads, _ = _execute(entry, values, sample, cpu, torch_dtype, backward,
                                              grad_outputs, None)
        except Exception:  # noqa: BLE001 - no low-precision CPU kernel: assert_close fallback
            low_outs = low_grads = None

    scale_outs: Optional[list] = None
    scale_grads: Optional[list] = None
    if is_float and entry.sum_of_products:  # Note [Condition of products and reductions]
        magnitudes = [_absolute(v) for v in values]
        abs_grads = [g.abs() for g in grad_outputs] if grad_outputs else grad_outputs
        scale_out_pairs, scale_grads, _ = _execute(entry, magnitudes, sample, cpu, up, backward,
                                                   abs_grads, None)
        scale_outs = [t for _, t in scale_out_pairs]

    if "fwd" in outcomes:
        _judge_all(outcomes["fwd"], [t for _, t in dut_outs], [t for _, t in ref_outs],
                   [t for _, t in low_outs] if low_outs is not None else None,
                   [label for label, _ in dut_outs], entry.standard, scale_outs)
    if "bwd" in outcomes:
        _judge_all(outcomes["bwd"], dut_grads or [], ref_grads or [], low_grads,
                   _grad_labels(sample), entry.gradient_standard, scale_grads)
    return list(outcomes.values())


def _absolute(value: Any) -> Any:
    """|value| for float tensors, element-wise through lists and tuples."""
    if isinstance(value, torch.Tensor):
        return value.abs() if value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(_absolute(v) for v in value)
    return value


def _judge_all(outcome: Outcome, duts: list, refs: list, lows: Optional[list],
               labels: list[str], standard: str, scales: Optional[list] = None) -> None:
    if len(duts) != len(refs):
        outcome.status = "error"
        outcome.error = f"DUT returned {len(duts)} tensors, the reference {len(refs)}"
        return
    for index, (dut, ref) in enumerate(zip(duts, refs)):
        label = labels[index] if index < len(labels) else f"t{index}"
        if dut is None and ref is None:
            continue
        if dut is None or ref is None:
            outcome.status = "fail"
            outcome.error = (f"{label}: DUT {'has no' if dut is None else 'has a'} value where "
                             f"the reference {'has one' if dut is None else 'has none'}")
            continue
        low = lows[index] if lows is not None and index < len(lows) else None
        scale = scales[index] if scales is not None and index < len(scales) else None
        verdict = compare_outputs(dut, ref, low, standard=standard, scale=scale)
        outcome.verdicts[label] = verdict
        if not verdict.passed and outcome.status == "pass":
            outcome.status = "fail"
