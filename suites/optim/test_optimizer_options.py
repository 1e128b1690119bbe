"""Every documented option of the family's optimizers, LR schedulers and clipping
functions, set to a non-default value on the DUT, against an fp64 reference outside the
DUT scope (the cases and their coverage: ``harness/training/optim_options.py``;
``python -m harness optim options`` prints the table).

- optimizer options (nesterov, dampening, amsgrad, centered, maximize, lr as a tensor,
  capturable, differentiable, ...) per implementation (for-loop, foreach, fused): the
  parameters after a few steps on fixed gradients match torch's for-loop optimizer in
  fp64 fed the same gradients, the state stays in the parameters' dtype, finite, on
  their device; differentiable steps also give the same gradient through the step;
- schedulers drive a DUT optimizer: the lr (and momentum) of every step and the
  parameters match the same scheduler driving the fp64 reference optimizer, and the lr
  matches the documented closed form where there is one;
- clipping: the norm and the clipped gradients match fp64, for norm types 1, 2, 3 and
  inf, foreach on and off; non-finite gradients raise exactly when the reference does.

An option or path this torch or device lacks is ``unsupported`` with torch's refusal as
the reason (capturable=True on CPU, an option an older torch does not have, a case the
fp64 reference of this torch cannot run).
"""

import pytest

from harness import ids
from harness.results import equal, lower
from harness.training import optim_options as oo

OPT_CASES = [(c, i) for c in oo.OPTIMIZER_CASES for i in oo.impls_for(c)]


def _reference_and_dut(device, case, impl, seed: int):
    """The fp64 reference (out of the scope: Note [DUT scope]) and the DUT's run of a
    case; :class:`oo.Refused` when this torch or device lacks the option."""
    ref = oo.reference(case, impl, seed=seed)
    with device.scope():
        dut = oo.run(case, impl, device=device.torch_device, seed=seed)
    return ref, dut


def _unsupported(results, record_id: str, exc: oo.Refused) -> None:
    results.outcome(record_id, "unsupported", str(exc), info={"reason": str(exc)})


@pytest.mark.parametrize("case,impl", OPT_CASES,
                         ids=[f"{c.subject}-{c.label}-{i}" for c, i in OPT_CASES])
def test_optimizer_option(device, results, settings, case, impl):
    seed = settings.seed
    record_id = ids.record("optim", case.subject, "float32", impl, f"option={case.label}")
    try:
        ref, dut = _reference_and_dut(device, case, impl, seed)
    except oo.Refused as exc:
        return _unsupported(results, record_id, exc)
    err = oo.distance(dut, ref, seed)
    state = dut.state
    bad_state = state["wrong_dtype"] + state["nonfinite"] + state["misplaced"]
    options = oo.case_options(case, impl)
    results.check(
        record_id, ok=err <= oo.PARAM_LIMIT and bad_state == 0,
        metrics={"rel_update_err": err, "state_dtypes": state["dtypes"],
                 "non_fp32_state": state["wrong_dtype"], "nonfinite_state": state["nonfinite"],
                 "misplaced_state": state["misplaced"]},
        rules={"rel_update_err": lower(rel=4.0, abs=oo.PARAM_LIMIT / 10),
               "state_dtypes": equal(), "non_fp32_state": equal(),
               "nonfinite_state": equal(), "misplaced_state": equal()},
        info={"options": {k: repr(v) for k, v in options.items()}, "steps": oo.STEPS},
        message=f"{oo.subject_name(case.subject)}({oo.describe(options)}) on "
                f"{device.type}: after {oo.STEPS} steps the parameters"
                f"{' and the gradient through the steps' if dut.leaf_grads else ''} differ "
                f"from the fp64 reference by {err:.3g} of the largest update (allowed "
                f"{oo.PARAM_LIMIT:g}); state {state['dtypes'] or '-'}: "
                f"{state['wrong_dtype']} tensors not float32, {state['nonfinite']} "
                f"non-finite values, {state['misplaced']} off the parameters' device")


@pytest.mark.parametrize("case", oo.SCHEDULER_CASES,
                         ids=[f"{c.subject}-{c.label}" for c in oo.SCHEDULER_CASES])
def test_scheduler(device, results, settings, case):
    seed = settings.seed
    record_id = ids.record("optim", case.subject.lower(), "float32", case.label, "schedule")
    try:
        ref, dut = _reference_and_dut(device, case, None, seed)
    except oo.Refused as exc:
        return _unsupported(results, record_id, exc)
    sched_err, update_err = oo.schedule_error(dut, ref), oo.update_error(dut, ref, seed)
    worst = max(range(len(ref.lrs)), key=lambda t: abs(dut.lrs[t] - ref.lrs[t]))
    # Note [Closed forms]: the documented schedule, where there is one
    documented = oo.closed_form(case)
    form_err = oo.seq_error(dut.lrs, documented) if documented else None
    metrics = {"rel_schedule_err": sched_err, "rel_update_err": update_err}
    rules = {"rel_schedule_err": lower(rel=4.0, abs=oo.SCHEDULE_LIMIT / 10),
             "rel_update_err": lower(rel=4.0, abs=oo.PARAM_LIMIT / 10)}
    if form_err is not None:
        metrics["rel_closed_form_err"] = form_err
        rules["rel_closed_form_err"] = lower(rel=4.0, abs=oo.SCHEDULE_LIMIT / 10)
    form_text = ("" if form_err is None else
                 f"; lr differs from the documented closed form by {form_err:.3g} "
                 f"(allowed {oo.SCHEDULE_LIMIT:g})")
    results.check(
        record_id, ok=(sched_err <= oo.SCHEDULE_LIMIT and update_err <= oo.PARAM_LIMIT
                       and (form_err or 0.0) <= oo.SCHEDULE_LIMIT),
        metrics=metrics, rules=rules,
        info={"lr": dut.lrs, "ref_lr": ref.lrs, "documented_lr": documented,
              "momentum": dut.momenta},
        message=f"{oo.subject_name(case.subject)}({oo.describe(case.kwargs)}) driving "
                f"{case.optimizer[0]} on {device.type}: lr/momentum differ from the "
                f"reference schedule by {sched_err:.3g} (allowed {oo.SCHEDULE_LIMIT:g}; "
                f"worst at step {worst}: lr {dut.lrs[worst]:.6g} vs {ref.lrs[worst]:.6g}), "
                f"parameters by {update_err:.3g} of the largest update (allowed "
                f"{oo.PARAM_LIMIT:g}){form_text}")


@pytest.mark.parametrize("case", oo.CLIPPING_CASES,
                         ids=[f"{c.subject}-{c.label}" for c in oo.CLIPPING_CASES])
def test_clipping(device, results, settings, case):
    seed = settings.seed
    record_id = ids.record("optim", case.subject, "float32", case.label)
    try:
        ref, dut = _reference_and_dut(device, case, None, seed)
    except oo.Refused as exc:
        return _unsupported(results, record_id, exc)
    err = oo.distance(dut, ref, seed)
    outcome = {"dut": dut.raised or "returned", "reference": ref.raised or "returned"}
    results.check(
        record_id, ok=err <= oo.CLIP_LIMIT,
        metrics={"rel_err": err, "raised": outcome["dut"]},
        rules={"rel_err": lower(rel=4.0, abs=oo.CLIP_LIMIT / 10), "raised": equal()},
        info={"reference_raised": outcome["reference"]},
        message=f"{oo.subject_name(case.subject)}({oo.describe(case.kwargs)}) on "
                f"{device.type}"
                f"{' with an inf gradient' if case.nonfinite else ''}: "
                + (f"{outcome['dut']} where the reference {outcome['reference']}"
                   if dut.raised or ref.raised else
                   f"norm and clipped gradients differ from fp64 by {err:.3g} (relative; "
                   f"allowed {oo.CLIP_LIMIT:g}; NaN/Inf where the reference has them)"))
