"""Option coverage of the optimizer family (harness.training.optim_options)."""

import math

import pytest
import torch

from harness import cli
from harness.training import optim_options as oo


def test_every_documented_option_is_exercised_or_explained():
    rows = oo.coverage()
    missing = {r.api: r.missing for r in rows if r.missing}
    assert not missing, (f"optimizer-family options left at their defaults without a reason: "
                         f"{missing}; add a case to harness/training/optim_options.py or a "
                         "reason to its REASONS / OPTION_REASONS")
    assert {r.subject for r in rows} >= set(oo.OPTIMIZERS) | {"StepLR", "CosineAnnealingLR",
                                                              "clip_grad_norm_"}
    assert sum(len(r.exercised) for r in rows) >= 70


@pytest.mark.parametrize("subject", list(dict.fromkeys(c.subject for c in oo.ALL_CASES)))
def test_every_exercised_option_moves_the_reference(subject):
    """Note [Option sensitivity]: a backend ignoring the option is caught by some case."""
    if oo.subject_api(subject) is None:
        pytest.skip(f"torch {torch.__version__} has no {oo.subject_name(subject)}")
    moved = oo.option_sensitivity(subject)
    weak = {k: v for k, v in moved.items() if v < oo.SENSITIVITY}
    assert not weak, (f"{subject}: with these options put back to their defaults the fp64 "
                      f"reference moves less than {oo.SENSITIVITY:g}, so a check cannot see "
                      f"them ignored: {weak}")


class _FakeSGD(torch.optim.SGD):
    def __init__(self, params, lr=1e-3, momentum=0, new_option=1.0, *, foreach=None,
                 fused=None):
        super().__init__(params, lr=lr, momentum=momentum, foreach=foreach, fused=fused)


def test_an_option_a_new_torch_adds_is_reported_missing(monkeypatch):
    monkeypatch.setattr(torch.optim, "FakeSGD", _FakeSGD, raising=False)
    monkeypatch.setitem(oo.OPTIMIZERS, "fake", "FakeSGD")
    rows = oo.coverage((oo.Case("fake", "momentum", {"lr": 0.05, "momentum": 0.9}),))
    assert [(r.subject, r.missing) for r in rows] == [
        ("fake", ["new_option"])]
    assert "foreach" in rows[0].exercised and "fused" in rows[0].exercised  # the sweep


def test_an_option_this_torch_lacks_is_refused_not_failed():
    case = oo.Case("sgd", "future", {"lr": 0.05, "no_such_option": True}, impls=("forloop",))
    with pytest.raises(oo.Refused, match="no_such_option"):
        oo.run(case, "forloop", device=torch.device("cpu"), seed=0)
    assert "no_such_option" not in oo.documented("sgd")
    assert "no_such_option" not in oo.exercised("sgd", (case,))


def test_a_wrong_answer_is_not_taken_for_a_refusal():
    assert oo.refusal(RuntimeError("lr as a Tensor is not supported for capturable=False "
                                   "and foreach=True")) is not None
    assert oo.refusal(RuntimeError("If capturable=True, params and state_steps must be on "
                                   "supported devices: ['cuda']")) is not None
    assert oo.refusal(RuntimeError("The size of tensor a (3) must match the size of "
                                   "tensor b (4)")) is None


def test_a_schedule_one_step_late_is_measured_as_different():
    case = next(c for c in oo.SCHEDULER_CASES if c.subject == "CosineAnnealingLR")
    ref = oo.run(case, None, device=None, seed=0)
    late = oo.Run(ref.params, lrs=[ref.lrs[0], *ref.lrs[:-1]], momenta=ref.momenta)
    assert oo.schedule_error(ref, ref) == 0.0
    assert oo.schedule_error(late, ref) > 100 * oo.SCHEDULE_LIMIT


def test_non_finite_values_count_only_where_the_reference_has_them():
    ref = oo.Run([], values=[torch.tensor([1.0, math.inf, math.nan])])
    same = oo.Run([], values=[torch.tensor([1.0, math.inf, math.nan])])
    nan_lost = oo.Run([], values=[torch.tensor([1.0, math.inf, 0.0])])
    sign = oo.Run([], values=[torch.tensor([1.0, -math.inf, math.nan])])
    assert oo.distance(same, ref, 0) == 0.0
    assert oo.distance(nan_lost, ref, 0) == math.inf
    assert oo.distance(sign, ref, 0) == math.inf
    assert oo.distance(oo.Run([], raised="RuntimeError"), oo.Run([], values=[]), 0) == math.inf


def test_command_prints_the_table_with_totals(capsys):
    assert cli.main(["optim", "options"]) == 0
    out = capsys.readouterr().out
    assert "torch.optim.SGD" in out and "torch.optim.lr_scheduler.OneCycleLR" in out
    last = out.splitlines()[-1]
    assert "documented options:" in last and "0 missing" in last


@pytest.mark.parametrize("case", [c for c in oo.SCHEDULER_CASES if oo.closed_form(c)],
                         ids=lambda c: f"{c.subject}-{c.label}")
def test_the_documented_closed_form_is_the_schedule_torch_runs(case):
    """Note [Closed forms]: the formulas agree with this torch's schedulers, so the check's
    closed-form metric fails only when a schedule changes."""
    ref = oo.reference(case, None, seed=0)
    assert oo.seq_error(ref.lrs, oo.closed_form(case)) <= oo.SCHEDULE_LIMIT / 100
    late = [ref.lrs[0], *ref.lrs[:-1]]
    assert oo.seq_error(late, oo.closed_form(case)) > 100 * oo.SCHEDULE_LIMIT
