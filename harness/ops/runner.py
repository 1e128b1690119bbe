"""The one generic runner: a catalog case on the DUT against its CPU references.

:func:`run_case` takes a :class:`~harness.device.Device` and plain values (an entry, a
dtype name, a sample, a seed), builds the inputs with a seeded generator, runs the op
forward and backward as the DUT (:func:`harness.ops.policy.run_dut`: measured inside
``device.scope()`` with CPU-fallback capture, then again to note the aten ops it
dispatched: Note [Measured without the harness]), runs the
up-cast reference and the low-precision reference outside it, and returns one
:class:`~harness.ops.outcome.OpOutcome` per direction (``fwd``, ``bwd``) with the metrics
of a :class:`~harness.compare.Verdict` per output / input gradient. Exceptions, standards
and judging follow the one op policy (:mod:`harness.ops.policy`), as in the OpInfo sweep.

Ids (stable across runs and torch versions: built from catalog names only):
case id ``<op>-<dtype>-<fwd|bwd>-<sample>`` (what ``--op-filter`` matches) and record id
``ops/<op>/<dtype>/<fwd|bwd>/<sample>``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

import torch

from harness import dtypes, ids
from harness.compare import Verdict
from harness.ops import policy
from harness.ops.outcome import OpOutcome
from harness.ops.spec import DTYPES, UPCAST, OpEntry, Sample, T, case_seed, lay_out, materialize

DIRECTIONS = ids.DIRECTIONS
case_id = ids.op_case      # ``exp-float16-fwd-odd257`` (harness.ids builds every record id)
record_id = ids.op_record  # ``ops/exp/float16/fwd/odd257``


filter_regex = ids.filter_regex


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
    args = [_place(value, spec, device, float_dtype, want_grad, leaves)
            for value, spec in zip(values, specs)]
    return args, leaves


def _place(value: Any, spec: Any, device: torch.device, float_dtype: Optional[torch.dtype],
           want_grad: bool, leaves: list[torch.Tensor]) -> Any:
    """One argument of :func:`_prepare` (lists and tuples element-wise): a tensor copied to
    ``device``, a float one of a :class:`T` in ``float_dtype``; its grad leaf appended to
    ``leaves``; anything else as it is."""
    if isinstance(value, torch.Tensor):
        is_t = isinstance(spec, T)
        floating = value.is_floating_point()
        cast = float_dtype if (is_t and spec.dtype is None and floating) else None
        tensor = value.to(device=device, dtype=cast or value.dtype, copy=True)
        leaf = want_grad and is_t and spec.grad and floating
        if is_t and spec.layout:  # Note [Argument layouts]
            tensor, base = lay_out(tensor, spec, leaf)
        else:
            base = tensor.requires_grad_(True) if leaf else tensor
        if leaf:
            leaves.append(base)
        return tensor
    if isinstance(value, (list, tuple)):
        return type(value)([_place(v, s, device, float_dtype, want_grad, leaves)
                            for v, s in zip(value, spec)])
    return value


def _differentiable(outs: list[tuple[str, Optional[torch.Tensor]]]) -> list[torch.Tensor]:
    return [t for _, t in outs if t is not None and t.requires_grad and t.is_floating_point()]


def _grads(outs: list[torch.Tensor], leaves: list[torch.Tensor],
           grad_outputs: list[torch.Tensor]) -> list[Optional[torch.Tensor]]:
    if not outs or not leaves:
        return [None] * len(leaves)
    return list(torch.autograd.grad(outs, leaves, grad_outputs, allow_unused=True))


def _execute(entry: OpEntry, values: list, sample: Sample, device: torch.device,
             float_dtype: Optional[torch.dtype], backward: bool,
             grad_outputs: Optional[list[torch.Tensor]], gen: Optional[torch.Generator],
             seen: Optional[policy.Watch] = None):
    """Forward (+ backward) of one execution; makes grad_outputs from ``gen`` if not given.
    ``seen`` (the DUT's :class:`~harness.ops.policy.Watch`) notes the op call as ``fwd`` and
    the backward call as ``bwd``, not the harness's copies and cotangents."""
    args, leaves = _prepare(values, sample.args, device, float_dtype, backward)
    with _Phase(seen, "fwd"):
        outs = _labelled(entry.fn(*args, **sample.kwargs))
    grads: Optional[list] = None
    if backward:
        diff = _differentiable(outs)
        if grad_outputs is not None and [tuple(g.shape) for g in grad_outputs] != [
                tuple(t.shape) for t in diff]:
            # the DUT's outputs have other shapes than these (a wrong-shape kernel): the
            # references draw their own cotangents, so they still run and the forward
            # judgement reports the shapes instead of the case going unjudged
            grad_outputs, gen = None, torch.Generator().manual_seed(len(diff))
        if grad_outputs is None:
            grad_outputs = [torch.randn(t.shape, generator=gen).to(t.dtype) for t in diff]
        gos = [g.to(device=device, dtype=t.dtype) for g, t in zip(grad_outputs, diff)]
        with _Phase(seen, "bwd"):
            grads = _grads(diff, leaves, gos)
    return outs, grads, grad_outputs


class _Phase:
    """``with _Phase(seen, "fwd"):`` notes the block's dispatches under ``fwd`` in a
    :class:`~harness.ops.policy.Watch` (nothing without one). A class, not a
    ``contextlib.contextmanager``: it is entered twice per execution, 50,000 times a run."""

    __slots__ = ("seen", "name")

    def __init__(self, seen: Optional[policy.Watch], name: str) -> None:
        self.seen, self.name = seen, name

    def __enter__(self) -> None:
        if self.seen is not None:
            self.seen.phase = self.name

    def __exit__(self, *exc) -> None:
        if self.seen is not None:
            self.seen.phase = None


def _grad_labels(sample: Sample) -> list[str]:
    labels = []
    for index, spec in enumerate(sample.args):
        specs = spec if isinstance(spec, (list, tuple)) and spec and isinstance(spec[0], T) else [spec]
        for sub, one in enumerate(specs):
            if isinstance(one, T) and one.grad:
                labels.append(f"grad{index}" if len(specs) == 1 else f"grad{index}_{sub}")
    return labels


# -------------------------------------------------------------------------- executor

# Note [One executor]
# ~~~~~~~~~~~~~~~~~~~
# Every op case, whichever pipeline made it (the catalog, the OpInfo sweep, a user model's
# captured call), is executed by :func:`execute` with the same rules; a pipeline only says
# how to run its case once (a :data:`Run`: on a device, in a dtype, noting aten ops or
# not, on magnitudes or not) and judges the sides it gets back:
#
# * the DUT first, measured then noted (Note [Measured without the harness] in
#   :mod:`harness.ops.policy`); if it raises, the one classifier says ``unsupported`` or
#   ``error`` (:mod:`harness.classify`); an ``error`` the CPU in the same dtype raises too
#   (same exception type) is the case's, not the device's: still ``error``, worded as a
#   harness error (a pipeline that draws cases it cannot vouch for, the OpInfo sweep,
#   leaves out the samples the CPU cannot run before executing them);
# * the CPU in the DUT's dtype (``low``: the CPU's own error, Note [CPU's own error] in
#   :mod:`harness.compare`); where it cannot run, the standards judge without it;
# * the up-cast CPU reference; where it cannot run, the DUT is judged against ``low`` and
#   ``reference`` says so; where neither can run, nothing can be compared: ``skip``;
# * magnitudes (``|inputs|`` up-cast) for sums of products (Note [Condition of products
#   and reductions]); where they cannot run, the plain standards apply.
#
# Note [A CPU DUT is its own low]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Where the DUT is the CPU and no fault is active (:func:`harness.faults.active`: the only
# way anything enters ``device.scope()`` on the CPU), the DUT's measured execution *is* the
# CPU's run in the DUT's dtype: the same kernels on the same inputs and cotangents, the
# scope adding nothing. So it is the ``low`` side too, not a third execution of the same
# computation (a default run made ~7,000 of them: ~5% of the op catalog's time), and the
# judgement, handed the DUT's tensor itself as the low-precision reference, measures its
# errors once instead of twice (:func:`harness.compare.compare_outputs`). A fault makes the
# DUT another kernel, so with one active (and on every other device, SimNPU included)
# ``low`` is run on its own as before. The records are the same either way (the 13,277 of
# ``suites/ops``: statuses, messages and rules equal, metrics to 2e-14 relative, the
# summation order of one row instead of two); ``tests/test_op_policy.py`` checks that no
# third execution runs and that a fault still gets its own ``low`` and fails,
# ``tests/test_compare.py`` that the verdict is that of an equal copy. A low handed in as
# a separate tensor with the DUT's bits (the OpInfo sweep's) is measured once as well
# (Note [A low equal to the DUT is the DUT] in :mod:`harness.compare`), so an op has the
# same metrics in every pipeline.


@dataclasses.dataclass
class Side:
    """One execution of a case: its outputs and input gradients, or what it raised."""

    outs: Any = None
    grads: Optional[list] = None
    error: Optional[BaseException] = None
    grad_error: Optional[BaseException] = None

    @property
    def ok(self) -> bool:
        return self.error is None


Run = Callable[[torch.device, Optional[torch.dtype], Optional[policy.Watch], bool], Side]
"""``run(where, dtype, noting, magnitudes)``: one execution of a case (Note [One executor]);
``dtype`` None keeps the case's own dtypes, ``noting`` is the Watch to set phases on."""


@dataclasses.dataclass
class Executed:
    """What :func:`execute` ran: the DUT, the references, and the status when nothing is
    left to judge (``status``: unsupported / error / skip, with ``message``)."""

    dut: Side
    seen: policy.Watch
    ref: Optional[Side] = None
    low: Optional[Side] = None
    mag: Optional[Side] = None
    reference: str = ""
    status: Optional[str] = None
    message: str = ""
    harness_error: bool = False


def _short(exc: BaseException, limit: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def cpu_is_its_own_low(device) -> bool:
    """Whether the DUT's measured run serves as the CPU's run in its dtype (Note [A CPU
    DUT is its own low]): a CPU DUT with no fault active."""
    return policy.bare_cpu(device)


def execute(device, run: Run, dtype: Optional[torch.dtype], up: Optional[torch.dtype], *,
            magnitudes: bool = False, low: Optional[Side] = None) -> Executed:
    """Run one op case as the DUT and on the CPU references (Note [One executor]);
    ``low``: the CPU's run in the DUT's dtype when the caller already made it."""
    seen = policy.Watch(phase=None)
    dut = policy.run_dut(device, lambda noting: run(device.torch_device, dtype, noting, False),
                         seen)
    cpu = torch.device("cpu")
    if low is None and dtype is not None:
        low = dut if cpu_is_its_own_low(device) else run(cpu, dtype, None, False)
    done = Executed(dut, seen, low=low if low is not None and low.ok else None)
    if not dut.ok:
        status, reason = policy.classify_exception(dut.error)
        done.status, done.message = status, reason
        if (status == "error" and low is not None and not low.ok
                and type(low.error) is type(dut.error)):
            done.harness_error = True
            done.message = (f"harness error, not the device's: the CPU in {dtypes.name(dtype)} "
                            f"raises the same ({_short(low.error)}); {reason}")
        return done
    ref = run(cpu, up, None, False)
    done.reference = dtypes.name(up) if up is not None else "its own dtype"
    if not ref.ok:
        if done.low is None:
            why = f"up-cast: {_short(ref.error, 150)}"
            if low is not None and low.error is not None:
                why += f"; in {dtypes.name(dtype)}: {_short(low.error, 150)}"
            done.status, done.message = "skip", f"no CPU reference can run this case ({why})"
            return done
        done.reference = f"{dtypes.name(dtype)} (up-cast failed: {_short(ref.error, 120)})"
        ref = done.low
    done.ref = ref
    if magnitudes:
        mag = run(cpu, up, None, True)
        done.mag = mag if mag.ok and mag.grad_error is None else None
    return done


# ---------------------------------------------------------------------------- runner

def run_case(device, entry: OpEntry, dtype: str, sample: Sample, seed: int = 0,
             directions: tuple[str, ...] = DIRECTIONS,
             judges: Optional[Mapping[str, Callable]] = None) -> list[OpOutcome]:
    """Run one case (op x dtype x sample) and judge it; never raises for op failures.

    Args:
        device: the :class:`~harness.device.Device` under test.
        entry, dtype, sample: the catalog row, a dtype name from ``entry.dtypes``, and one
            of ``entry.samples``.
        seed: the global seed; inputs are drawn from ``case_seed(seed, op, dtype, sample)``.
        directions: which of ``fwd``/``bwd`` to report (``bwd`` only where the entry and
            the dtype have a backward).
        judges: per direction, a judge with :func:`harness.ops.policy.judge`'s signature
            to use instead of it (the special-value samples add an exact rule for specials
            to the policy's, :func:`harness.ops.edge.judge_specials`).
    Returns:
        One :class:`~harness.ops.outcome.OpOutcome` per reported direction; ``info`` holds
        ``aten_ops`` (Note [Aten ops of a record] in :mod:`harness.ops.policy`).
    """
    ((_, outcomes),) = run_cases(device, entry, [(dtype, sample, directions)], seed, judges)
    return outcomes


# Note [A test's outputs judged together]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Judging an output costs about thirty torch calls whatever its size, and a catalog test
# has about eight outputs (its samples, forward and backward), so :func:`run_cases` runs
# the cases one by one and hands their outputs to :func:`harness.ops.policy.judge_many`
# together: one pass of the statistics for all of them (Note [Outputs measured together]
# in :mod:`harness.compare`), the same verdicts, metrics and rules as one at a time. It
# waits with the judgement until the outputs held hold JUDGED_TOGETHER elements, so a
# test of large samples holds one case's tensors, as before, and then hands each case's
# outcomes back in order. Only the judgement waits: every case is run, and measured,
# exactly as alone.

JUDGED_TOGETHER = 1 << 18
"""The outputs' elements held for one judgement (Note [A test's outputs judged together])."""


@dataclasses.dataclass
class _Waiting:
    """A case run and not judged yet: its outcomes, what each outcome asks to be judged
    (``(outcome, label, judge, request)``; ``judge`` None is the policy's), and the
    DUT's :class:`~harness.ops.policy.Watch` (its CPU fallbacks, once judged)."""

    case: tuple[str, Sample]
    outcomes: list[OpOutcome]
    asked: list[tuple[OpOutcome, str, Optional[Callable], policy.Asked]]
    seen: Optional[policy.Watch] = None

    @property
    def size(self) -> int:
        return sum(request.dut.numel() for *_, request in self.asked)


def run_cases(device, entry: OpEntry, cases, seed: int = 0,
              judges: Optional[Mapping[str, Callable]] = None):
    """:func:`run_case` of each ``(dtype, sample, directions)`` of ``cases``, in order:
    yields ``((dtype, sample), outcomes)``; the outputs are judged together (Note [A
    test's outputs judged together])."""
    waiting: list[_Waiting] = []
    held = 0
    for dtype, sample, directions in cases:
        case = _run_one(device, entry, dtype, sample, seed, directions, judges or {})
        waiting.append(case)
        held += case.size
        if held >= JUDGED_TOGETHER:
            yield from _judged(waiting)
            waiting, held = [], 0
    yield from _judged(waiting)


def _judged(waiting: list[_Waiting]):
    """Judge what the cases ask (the policy's in one call), then hand back each case."""
    policy_asked = [request for case in waiting for _, _, judge, request in case.asked
                    if judge is None or isinstance(judge, policy.WithCheck)]
    found = iter(policy.judge_many(policy_asked))
    for case in waiting:
        verdicts: dict[int, tuple[OpOutcome, dict[str, Verdict]]] = {}
        for outcome, label, judge, request in case.asked:
            if judge is None:
                verdict, _ = next(found)
            elif isinstance(judge, policy.WithCheck):
                verdict, _ = judge.merged(next(found), request)
            else:
                verdict, _ = judge(*request)
            verdicts.setdefault(id(outcome), (outcome, {}))[1][label] = verdict
        for outcome, by_label in verdicts.values():
            outcome.apply_verdicts(by_label)
        seen = case.seen
        if seen is not None and seen.fallback:  # right numbers, but on the host CPU
            for outcome in case.outcomes:
                outcome.fallback = list(seen.fallback.ops)
                if outcome.status == "pass":
                    outcome.status = "fallback"
                    outcome.message = (f"the DUT ran {', '.join(seen.fallback.ops)} on the "
                                       f"host CPU ({seen.fallback.describe()})")
        yield case.case, case.outcomes


def _run_one(device, entry: OpEntry, dtype: str, sample: Sample, seed: int,
             directions: tuple[str, ...], judges: Mapping[str, Callable]) -> _Waiting:
    """One case run, its outputs waiting for their judgement (:func:`run_cases`)."""
    gen = torch.Generator().manual_seed(case_seed(seed, entry.name, dtype, sample.name))
    torch_dtype = DTYPES[dtype]
    is_float = torch_dtype.is_floating_point
    # a sample without a gradient leaf (the forward-only size samples) has no bwd record
    grad_labels = _grad_labels(sample)
    backward = entry.backward and is_float and "bwd" in directions and bool(grad_labels)
    wanted = [d for d in directions if d == "fwd" or backward]
    outcomes = {d: OpOutcome(record_id(entry.name, dtype, d, sample.name), d,
                             standard=entry.standard if d == "fwd" else entry.gradient_standard)
                for d in wanted}
    waiting = _Waiting((dtype, sample), list(outcomes.values()), [])
    if not outcomes:
        return waiting
    values = materialize(sample, dtype, gen)
    if entry.judge is not None:
        waiting.outcomes = entry.judge(device, entry, dtype, sample, values, gen, outcomes)
        return waiting

    drawn: list = []  # the cotangents the DUT drew; the references reuse them

    def run(where: torch.device, float_dtype: Optional[torch.dtype],
            noting: Optional[policy.Watch], magnitudes: bool) -> Side:
        try:
            outs, grads, cotangents = _execute(
                entry, [_absolute(v) for v in values] if magnitudes else values, sample,
                where, float_dtype, backward,
                ([g.abs() for g in drawn[0]] if magnitudes and drawn[0] else drawn[0])
                if drawn else None, None if drawn else gen, noting)
        except Exception as exc:  # noqa: BLE001 - classified by the executor
            return Side(error=exc)
        if not drawn:
            drawn.append(cotangents)
        return Side([t for _, t in outs] if magnitudes else outs, grads)

    done = execute(device, run, torch_dtype if is_float else None,
                   DTYPES[UPCAST[dtype]] if is_float else None,
                   magnitudes=is_float and entry.sum_of_products)
    aten_ops = done.seen.info()
    if done.status is not None:
        for outcome in outcomes.values():
            outcome.status = done.status
            outcome.message = (done.message if done.dut.error is None or done.harness_error
                               else f"DUT raised {type(done.dut.error).__name__}: "
                                    f"{done.dut.error}")
            outcome.info = {"aten_ops": aten_ops, "exception": done.message}
        return waiting
    for outcome in outcomes.values():
        outcome.info["aten_ops"] = aten_ops
        if done.ref is done.low:
            outcome.info["reference"] = done.reference
    dut_outs, dut_grads = done.dut.outs, done.dut.grads
    ref_outs, ref_grads = done.ref.outs, done.ref.grads
    low_outs = done.low.outs if done.low is not None else None
    low_grads = done.low.grads if done.low is not None else None
    scale_outs = done.mag.outs if done.mag is not None else None
    scale_grads = done.mag.grads if done.mag is not None else None
    waiting.seen = done.seen
    if "fwd" in outcomes:
        waiting.asked += _asked(outcomes["fwd"], [t for _, t in dut_outs],
                                [t for _, t in ref_outs],
                                [t for _, t in low_outs] if low_outs is not None else None,
                                [label for label, _ in dut_outs], scale_outs, judges.get("fwd"))
    if "bwd" in outcomes:
        waiting.asked += _asked(outcomes["bwd"], dut_grads or [], ref_grads or [], low_grads,
                                grad_labels, scale_grads, judges.get("bwd"))
    return waiting


def _absolute(value: Any) -> Any:
    """|value| for float tensors, element-wise through lists and tuples."""
    if isinstance(value, torch.Tensor):
        return value.abs() if value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(_absolute(v) for v in value)
    return value


def _asked(outcome: OpOutcome, duts: list, refs: list, lows: Optional[list],
           labels: list[str], scales: Optional[list] = None,
           judge: Optional[Callable] = None) -> list:
    """What judging each DUT tensor against its references under ``outcome.standard``
    asks (:class:`_Waiting`'s ``asked``); a structural mismatch sets the outcome's status
    at once."""
    if len(duts) != len(refs):
        outcome.status = "error"
        outcome.message = f"DUT returned {len(duts)} tensors, the reference {len(refs)}"
        return []
    asked = []
    for index, (dut, ref) in enumerate(zip(duts, refs)):
        label = labels[index] if index < len(labels) else f"t{index}"
        if dut is None and ref is None:
            continue
        if dut is None or ref is None:
            outcome.status = "fail"
            outcome.message = (f"{label}: DUT {'has no' if dut is None else 'has a'} value "
                               f"where the reference {'has one' if dut is None else 'has none'}")
            continue
        low = lows[index] if lows is not None and index < len(lows) else None
        scale = scales[index] if scales is not None and index < len(scales) else None
        asked.append((outcome, label, judge,
                      policy.Asked(dut, ref, low, outcome.standard, scale)))
    return asked
