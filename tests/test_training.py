import math

import pytest
import torch

from harness import training

SHORT = training.spec_for("small", steps=12, n_train=128, n_test=64, window=4)


def test_dut_and_reference_start_from_the_same_weights():
    a, b = training.initial_model(SHORT), training.initial_model(SHORT)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


def test_fp32_dut_run_on_cpu_equals_the_reference(cpu):
    dut = training.train(SHORT, cpu)
    ref = training.train(SHORT, cpu, dut=False)
    assert dut.losses == ref.losses and dut.accuracy == ref.accuracy


def test_bf16_run_is_close_but_not_identical(cpu):
    dut = training.train(SHORT, cpu, amp_dtype=torch.bfloat16)
    ref = training.reference(SHORT)
    assert dut.losses != ref.losses
    assert abs(dut.losses[0] - ref.losses[0]) < 0.05


def test_fp16_run_uses_a_grad_scaler_and_counts_skips(cpu):
    run = training.train(SHORT, cpu, amp_dtype=torch.float16, steps=6, evaluate=False,
                         scaler_kwargs={"init_scale": 2.0 ** 40})
    assert len(run.scales) == 6 and run.skipped[0] == 0  # 2^40 overflows fp16 at once
    assert run.scales[-1] < 2.0 ** 40
    assert math.isnan(run.accuracy)


def test_convergence_metrics_compare_windows():
    class R:
        def __init__(self, losses, acc=50.0, skipped=()):
            self.losses, self.accuracy, self.skipped = losses, acc, list(skipped)

    ref = R([2.0, 2.0, 1.0, 1.1, 1.0, 1.1])
    dut = R([2.0, 2.0, 1.0, 1.4, 1.0, 1.4], acc=45.0, skipped=[3])
    m = training.convergence(dut, ref, window=2)
    assert m["loss_ratio"] == pytest.approx(1.2 / 2.0)
    assert m["accuracy_gap_points"] == 5.0 and m["skipped_steps"] == 1
    assert m["oscillation_ratio"] > 1.0


def test_unknown_model_and_scale_are_refused():
    with pytest.raises(ValueError, match="unknown model"):
        training.model_factory("vgg")
    with pytest.raises(ValueError, match="unknown training scale"):
        training.spec_for("huge")
