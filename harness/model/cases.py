"""Every captured call as a conformance case, judged exactly as the op catalog judges.

Each distinct (op, signature) of a :class:`~harness.model.capture.StepCapture` becomes an
:class:`~harness.ops.spec.OpEntry` with one :class:`~harness.ops.spec.Sample` of the
captured shapes, dtypes and strides, and runs through the catalog's own runner
(:func:`harness.ops.runner.run_case`): seeded inputs, the DUT inside ``device.scope()``,
the CPU up-cast reference and the CPU low-precision reference outside it, one
:class:`~harness.compare.Verdict` per output and input gradient under the standards table
of :mod:`harness.compare`. One policy, not a third pipeline.

Record ids: ``model/<name>/<op>/<digest>/<fwd|bwd>``, e.g.
``model/resnet18/aten.convolution.default/5e7c136e/bwd`` (the digest: Note [Capture
signatures] in :mod:`harness.model.capture`), stable across runs and torch versions as
long as the model dispatches the same call.

Note [Replaying a captured call]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
* Values: integer and boolean arguments (indices, offsets, masks, lengths, counters) are
  the captured values of the call, passed as plain tensors that the runner copies as they
  are (Note [Captured integer values]); floats are drawn afresh by the catalog's
  generators within the captured range (Note [Captured value ranges]): ``positive`` when
  every captured value was >= 0 (a variance, an inverse std, a ReLU output), else
  ``normal``. An integer argument too large to keep is drawn within its captured range.
* Dtypes: the case's dtype is the first floating input's; inputs of that dtype are
  up-cast for the reference (and a ``dtype=`` argument equal to it follows them), others
  keep their captured dtype on both sides; :data:`NO_UPCAST` ops (AMP's fp32-only scale
  kernels) keep every dtype, so their reference is the CPU in the captured dtypes.
* Layouts: a non-contiguous input, or one at a storage offset, is drawn (an integer one:
  kept) as its storage (1-D: the offset, then the span its sizes and strides reach) and
  viewed with the captured sizes, strides and offset (``as_strided``), so the DUT kernel
  sees the layout the model gave it: channels_last, a stride-0 broadcast, a transpose, a
  chunk inside a larger buffer (Note [Captured layouts] in :mod:`harness.model.capture`).
* Devices: a ``device=`` argument becomes the executing side's device; an op without
  tensor inputs gets a 0-element anchor tensor that says where it runs.
* Mutation: in-place ops run on copies (the runner copies every input); the written
  arguments are compared as outputs (BatchNorm's running statistics, an optimizer's
  parameters), and ones that need a gradient are cloned first.
* Backward: only for calls from the forward phase with inputs that required grad, and
  only where autograd has a derivative (probed on the meta device, else the CPU);
  backward-phase and optimizer calls are checked forward only, as the kernels they are.
* Standards: the op policy's table (:func:`harness.ops.policy.standard_for`, the catalog's
  and the OpInfo sweep's), keyed by the aten name; a clamp whose bound the case's dtype
  cannot hold is judged as the catalog's ``*_rounded_bound`` rows
  (:func:`~harness.ops.policy.rounded_bound_key`).
* Random and uninitialised ops (:data:`SKIP_OPS`) are recorded ``skip`` with the reason.

Note [Replay errors are the harness's]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The model's own step ran every captured call on the CPU without an error. So when a
replay raises, the first question is whether the replay itself is at fault (inputs that
break the op's contract, a reference dtype the CPU lacks): :func:`run_model_case` runs
the same replay on the CPU outside the DUT scope, in the case's dtype and in the
reference's. If that raises too, the error is the harness's, not the device's: the record
is ``error`` with ``info["harness_error"]`` and a message that says so and names the fix
(:func:`harness_error`); the device is not blamed for an input the harness made up. Only
an error the CPU does not reproduce stays the DUT's (``error`` or ``unsupported``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import torch

from harness import dtypes, fallback, ids
from harness.model.capture import (
    DEVICE,
    IGNORED_NAMESPACES,
    Call,
    DevicePlaceholder,
    Range,
    StepCapture,
    TensorMeta,
    storage_span,
)
from harness.ops import policy
from harness.ops.outcome import OpOutcome
from harness.ops.runner import run_case
from harness.ops.spec import DTYPES, UPCAST, I, M, OpEntry, Sample, T, case_seed, materialize

SKIP_OPS: dict[str, str] = {
    **{op: "random: its output is a random draw" for op in (
        "aten.native_dropout", "aten.bernoulli", "aten.bernoulli_", "aten.rand",
        "aten.rand_like", "aten.randn", "aten.randn_like", "aten.randint",
        "aten.randint_like", "aten.randperm", "aten.normal", "aten.normal_", "aten.uniform_",
        "aten.exponential_", "aten.geometric_", "aten.log_normal_", "aten.cauchy_",
        "aten.multinomial", "aten.rrelu_with_noise")},
    **{op: "undefined output: uninitialised memory" for op in (
        "aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty",
        "aten.new_empty_strided", "aten.empty_permuted", "aten.resize_", "aten.set_")},
}
"""Ops whose output a DUT and a reference cannot agree on by design (by overload packet)."""


NO_UPCAST: dict[str, str] = {
    "aten._amp_foreach_non_finite_check_and_unscale_": "the kernel takes fp32 scales only",
    "aten._amp_update_scale_": "the kernel takes an fp32 scale only",
}
"""Ops whose reference runs in the captured dtypes (no up-cast), with the reason."""


def packet(op: str) -> str:
    """``aten.add_.Tensor`` -> ``aten.add_``."""
    return ".".join(op.split(".")[:2])


class _CaseDtype:
    """A ``dtype=`` argument equal to the case's dtype (Note [Replaying a captured call])."""

    def __repr__(self) -> str:
        return "<case dtype>"


CASE_DTYPE = _CaseDtype()


# ------------------------------------------------------------------------ the replay

class Replay:
    """The OpEntry's callable: rebuilds the captured call from the runner's tensors.

    Called as ``replay(*values)`` where ``values`` are the sample's materialized
    arguments (positional arguments, then keyword-argument values), on the DUT or the
    CPU; restrides, resolves device and dtype placeholders, runs the aten overload, and
    returns its outputs plus the arguments it wrote. Inside the DUT scope the call runs
    under :func:`harness.fallback.capture`; what it saw falling back is kept in
    :attr:`fallbacks`.
    """

    def __init__(self, overload, n_args: int, kw_names: Sequence[str],
                 layouts: dict[int, tuple[tuple[int, ...], tuple[int, ...], int]],
                 mutates: Sequence[int], anchor: bool, dtype_from: Optional[int]) -> None:
        self.overload = overload
        self.n_args = n_args
        self.kw_names = tuple(kw_names)
        self.layouts = layouts
        self.mutates = tuple(mutates)
        self.anchor = anchor
        self.dtype_from = dtype_from
        self.fallbacks: list[str] = []
        self.__name__ = str(overload)

    def __call__(self, *values: Any) -> Any:
        from harness.device import Device

        values_list = list(values)
        anchor = values_list.pop(0) if self.anchor else None
        tensors: list[torch.Tensor] = []

        def fix(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                index = len(tensors)
                if index in self.layouts:
                    shape, stride, offset = self.layouts[index]
                    value = value.as_strided(shape, stride, offset)
                if index in self.mutates and value.requires_grad:
                    value = value.clone()
                tensors.append(value)
                return value
            if isinstance(value, (list, tuple)):
                return type(value)(fix(v) for v in value)
            return value

        values_list = [fix(v) for v in values_list]
        where = anchor.device if anchor is not None else tensors[0].device
        dtype = tensors[self.dtype_from].dtype if self.dtype_from is not None else None

        def resolve(value: Any) -> Any:
            if isinstance(value, DevicePlaceholder):
                return where
            if isinstance(value, _CaseDtype):
                return dtype
            if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
                return type(value)(resolve(v) for v in value)
            return value

        values_list = [resolve(v) for v in values_list]
        args = values_list[:self.n_args]
        kwargs = dict(zip(self.kw_names, values_list[self.n_args:]))
        if Device.in_scope():
            with fallback.capture(where.type, trace_known=False) as seen:
                out = self.overload(*args, **kwargs)
            self.fallbacks.extend(op for op in seen.ops if op not in self.fallbacks)
        else:
            out = self.overload(*args, **kwargs)
        return _outputs(out, [tensors[i] for i in self.mutates if i < len(tensors)])


def _flat_tensors(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flat_tensors(v)]
    return [value]


def _outputs(out: Any, written: list[torch.Tensor]) -> Any:
    """An op's result for the runner: tensors (scalars as 0-d tensors), plus written
    arguments the result does not already return."""
    items = [] if out is None else _flat_tensors(out)
    items = [torch.tensor(x) if isinstance(x, (bool, int, float)) else x for x in items]
    items = [x for x in items if isinstance(x, torch.Tensor) or x is None]
    for tensor in written:
        if not any(tensor is x for x in items):
            items.append(tensor)
    if len(items) == 1:
        return items[0]
    return tuple(items)


# --------------------------------------------------------------------------- cases

@dataclasses.dataclass
class ModelCase:
    """One captured call, ready to run: the catalog entry, its sample and dtype."""

    model: str
    call: Call
    entry: Optional[OpEntry]
    sample: Optional[Sample]
    dtype: str
    directions: tuple[str, ...]
    skip: str = ""

    @property
    def param_id(self) -> str:
        """The pytest parameter id: ``resnet18-aten.convolution.default-5e7c136e``."""
        return f"{self.model}-{self.call.op}-{self.call.digest}"

    def record_id(self, direction: str) -> str:
        return ids.model_record(self.model, self.call.op, self.call.digest, direction)


def _float_domain(low: Optional[float], high: Optional[float]) -> str:
    if low is not None and low >= 0 and high is not None and high > 0:
        return "positive"
    return "normal"


def _restrided(meta: TensorMeta) -> bool:
    """Whether the replay views the drawn storage with the captured strides and offset."""
    return not meta.contiguous or meta.offset > 0


def _spec_for(meta: TensorMeta, rng: Range, value: Optional[torch.Tensor],
              primary: Optional[str], grad: bool):
    """The sample argument of one captured tensor: its captured values (integer, boolean),
    else a spec the runner draws from (Note [Replaying a captured call])."""
    if value is not None:  # the storage span; a contiguous one is the tensor itself
        if not _restrided(meta):
            return value.reshape(meta.shape)
        return torch.cat([value.new_zeros(meta.offset), value]) if meta.offset else value
    shape = ((meta.offset + storage_span(meta.shape, meta.stride),) if _restrided(meta)
             else meta.shape)
    dtype = DTYPES.get(meta.dtype)
    if dtype is None:
        raise ValueError(f"dtype {meta.dtype} cannot be replayed")
    if dtype == torch.bool:
        p = rng.high if rng.low is not None and rng.low == rng.high else 0.5
        return M(shape, p)
    if dtype == torch.int64:
        low = int(rng.low) if rng.low is not None else 0
        high = int(rng.high) + 1 if rng.high is not None else low + 1
        return I(shape, high=max(high, low + 1), low=low)
    if not dtype.is_floating_point:
        domain = "positive" if rng.low is not None and rng.low >= 0 else "normal"
        return T(shape, domain, grad=False, dtype=meta.dtype)
    return T(shape, _float_domain(rng.low, rng.high), grad=grad and meta.requires_grad,
             dtype=None if meta.dtype == primary else meta.dtype)


def _primary_dtype(tensors: list[TensorMeta]) -> tuple[str, Optional[int]]:
    for index, meta in enumerate(tensors):
        if meta.dtype in DTYPES and DTYPES[meta.dtype].is_floating_point:
            return meta.dtype, index
    for index, meta in enumerate(tensors):
        if meta.dtype in DTYPES:
            return meta.dtype, index
    return "float32", None


def _overload(op: str):
    namespace, name, overload = op.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), name), overload)


def build_case(model: str, call: Call) -> ModelCase:
    """A :class:`ModelCase` for one captured call (Note [Replaying a captured call])."""
    tensors = call.tensors()
    kept = call.values or [None] * len(tensors)
    primary, primary_index = _primary_dtype(tensors)
    upcast = primary if packet(call.op) not in NO_UPCAST else None
    skip = SKIP_OPS.get(packet(call.op), "")
    if skip:
        return ModelCase(model, call, None, None, primary, ("fwd",), skip)
    try:
        overload = _overload(call.op)
    except (AttributeError, ValueError) as exc:
        return ModelCase(model, call, None, None, primary, ("fwd",),
                         f"cannot find {call.op} in torch.ops ({exc})")
    wants_grad = call.phase == "forward" and any(m.requires_grad for m in tensors)
    counter = iter(range(len(tensors)))
    layouts: dict[int, tuple[tuple[int, ...], tuple[int, ...], int]] = {}

    def spec(value: Any) -> Any:
        if isinstance(value, TensorMeta):
            index = next(counter)
            if _restrided(value):
                layouts[index] = (value.shape, value.stride, value.offset)
            return _spec_for(value, call.ranges[index], kept[index], upcast, wants_grad)
        if isinstance(value, (list, tuple)):
            return type(value)(spec(v) for v in value)
        if isinstance(value, torch.dtype) and dtypes.name(value) == primary \
                and primary_index is not None:
            return CASE_DTYPE
        return value

    try:
        values = [spec(v) for v in (*call.args, *call.kwargs.values())]
    except ValueError as exc:
        return ModelCase(model, call, None, None, primary, ("fwd",), str(exc))
    anchor = primary_index is None or any(
        isinstance(v, DevicePlaceholder) for v in _flat_tensors(values))
    if anchor:
        values.insert(0, T((0,), grad=False))
    replay = Replay(overload, len(call.args), list(call.kwargs), layouts, call.mutates,
                    anchor, primary_index)
    key = policy.rounded_bound_key(call.op, _scalars(call), DTYPES[primary])
    entry = OpEntry(name=call.op, fn=replay, samples=(), dtypes=(primary,),
                    backward=wants_grad, standard=policy.standard_for(key, primary),
                    grad_standard=policy.standard_for(key, primary, "bwd"))
    sample = Sample(call.digest, tuple(values))
    if wants_grad and not _has_derivative(entry, sample, primary):
        entry = dataclasses.replace(entry, backward=False)
    directions = ("fwd", "bwd") if entry.backward else ("fwd",)
    return ModelCase(model, call, entry, sample, primary, directions)


def _scalars(call: Call) -> list:
    """The call's non-tensor numbers (a clamp's bounds)."""
    return [v for v in (*call.args, *call.kwargs.values()) if isinstance(v, (int, float))]


def _has_derivative(entry: OpEntry, sample: Sample, dtype: str) -> bool:
    """Whether autograd can differentiate the call: the runner's own execution, on the meta
    device (no compute), else on the CPU."""
    from harness.ops.runner import _execute  # the catalog's execution, not a copy of it
    from harness.ops.spec import materialize

    gen = torch.Generator().manual_seed(0)
    values = materialize(sample, dtype, gen)
    for where in ("meta", "cpu"):
        try:
            _, grads, _ = _execute(entry, values, sample, torch.device(where),
                                   DTYPES[dtype], True, None, gen)
            return grads is not None and any(g is not None for g in grads)
        except NotImplementedError:
            continue  # no meta kernel: try the CPU
        except Exception:  # noqa: BLE001 - "derivative not implemented" and friends
            return False
    return False


def build_cases(capture: StepCapture) -> list[ModelCase]:
    """One case per distinct call, bookkeeping namespaces left out."""
    return [build_case(capture.model, call) for call in capture.calls
            if call.op.split(".", 1)[0] not in IGNORED_NAMESPACES]


def run_model_case(device, case: ModelCase, seed: int = 0) -> list[OpOutcome]:
    """Run one case on the DUT against the CPU references (the catalog's runner).

    The runner's outcomes, with the model's record ids, the captured call's details as
    ``info`` and the ops the replay saw falling back to the CPU as ``fallback``."""
    info = {"signature": case.call.signature[:500], "phases": dict(case.call.phases),
            "count": case.call.count}
    if case.skip or case.entry is None or case.sample is None:
        return [OpOutcome(case.record_id("fwd"), status="skip", message=case.skip, info=info)]
    replay: Replay = case.entry.fn
    replay.fallbacks.clear()
    outcomes = run_case(device, case.entry, case.dtype, case.sample, seed, case.directions)
    cause = ""  # Note [Replay errors are the harness's]
    if any(o.status in ("error", "unsupported") for o in outcomes):
        cause = cpu_replay_error(case, seed)
    out = []
    for outcome in outcomes:
        status, message = outcome.status, ""
        if cause and status in ("error", "unsupported"):
            out.append(harness_error(case, outcome, cause, dict(info)))
            continue
        if status != "pass":
            message = (f"{outcome.message}\n"
                       f"(device {device.type}, dtype {case.dtype}, standard {outcome.standard}, "
                       f"{case.call.op}{case.call.signature[:300]}; "
                       f"{case.call.count} call(s) in {', '.join(case.call.phases)})")
        elif replay.fallbacks:
            status = "fallback"
            message = (f"{case.record_id(outcome.direction)}: the DUT ran "
                       f"{', '.join(replay.fallbacks)} on the host CPU (CPU fallback)")
        out.append(dataclasses.replace(outcome, id=case.record_id(outcome.direction),
                                       status=status, message=message, info=dict(info),
                                       fallback=list(replay.fallbacks)))
    return out


def cpu_replay_error(case: ModelCase, seed: int = 0) -> str:
    """What the case's replay raises on the CPU outside the DUT scope, in the case's dtype
    and then in the reference's; ``""`` when both run (Note [Replay errors are the
    harness's]). The inputs are the runner's own: the same sample, seed and execution."""
    from harness.ops.runner import _execute  # the catalog's execution, not a copy of it

    dtype = DTYPES[case.dtype]
    float_dtypes = (dtype, DTYPES[UPCAST[case.dtype]]) if dtype.is_floating_point else (None,)
    backward = case.entry.backward and "bwd" in case.directions
    for float_dtype in float_dtypes:
        gen = torch.Generator().manual_seed(
            case_seed(seed, case.entry.name, case.dtype, case.sample.name))
        values = materialize(case.sample, case.dtype, gen)
        try:
            _execute(case.entry, values, case.sample, torch.device("cpu"), float_dtype,
                     backward, None, gen)
        except Exception as exc:  # noqa: BLE001 - any error of the replay is the answer
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            return (f"on the CPU in {dtypes.name(float_dtype or dtype)}: "
                    f"{type(exc).__name__}: {first}")
    return ""


def harness_error(case: ModelCase, outcome: OpOutcome, cause: str,
                  info: dict[str, Any]) -> OpOutcome:
    """The record of a replay the harness got wrong: ``error``, attributed to the harness
    (``info["harness_error"]``), with the fix; the DUT's own error kept as detail (Note
    [Replay errors are the harness's])."""
    dut = (outcome.message.strip().splitlines() or [""])[0][:300]
    message = (f"harness error, not the device's: the replay of {case.call.op} raises "
               f"outside the DUT scope too ({cause}); the model's own step ran this call "
               "without error, so the replay's inputs break the op's contract. "
               "Fix the replay in harness/model/cases.py (Note [Replaying a captured call]: "
               "keep the argument's captured values or draw it to the op's documented "
               "contract) and report it with this record id.\n"
               f"(the DUT's error: {dut}; {case.call.op}{case.call.signature[:300]}; "
               f"{case.call.count} call(s) in {', '.join(case.call.phases)})")
    return dataclasses.replace(outcome, id=case.record_id(outcome.direction), status="error",
                               message=message, info={**info, "harness_error": cause},
                               fallback=[])


__all__ = ["CASE_DTYPE", "DEVICE", "SKIP_OPS", "ModelCase", "Replay", "build_case",
           "build_cases", "cpu_replay_error", "harness_error", "run_model_case"]
