"""AMP convergence: train on the DUT under autocast (fp16 with a GradScaler; bf16) and,
from the same initial weights and data order, on the CPU in fp32; compare the runs.

Each criterion is its own record with a rule, so baselines catch slow drift as well as
outright failure. The loss curves travel in ``info``. A failing record's message ends with
the divergence finder's report (:mod:`harness.training.localize`) on the model's first batch.
"""

import pytest
import torch

from harness import dtypes as dt
from harness import ids, training
from harness.results import higher, lower
from harness.training import localize

AMP_DTYPES = list(dt.AMP.values())


def _name(dtype: torch.dtype) -> str:
    return dt.name(dtype)


@pytest.mark.parametrize("amp_dtype", AMP_DTYPES, ids=_name)
def test_amp_convergence(device, results, settings, amp_dtype):
    spec = training.spec_for(settings.training_scale, seed=settings.seed)
    limits = training.LIMITS[settings.training_scale]
    ref = training.reference(spec)
    dut = training.train(spec, device, amp_dtype=amp_dtype)
    m = training.convergence(dut, ref, spec.window)
    base = ids.record("amp", "convergence", _name(amp_dtype), f"{spec.model}-{spec.scale}")
    curves = {"dut_loss": dut.curve(), "ref_loss": ref.curve(), "skipped": dut.skipped,
              "scales": dut.scales[-5:], "steps": spec.steps, "batch_size": spec.batch_size}
    band = max(limits.final_loss_abs, limits.final_loss_rel * m["ref_final_window_loss"])
    checks = [
        ("loss_falls", m["loss_ratio"] <= limits.loss_ratio,
         {"loss_ratio": m["loss_ratio"], "first_window_loss": m["first_window_loss"],
          "final_window_loss": m["final_window_loss"]},
         {"loss_ratio": lower(rel=1.25, abs=0.05)},
         f"loss did not fall: final-window mean {m['final_window_loss']:.4g} / first-window "
         f"mean {m['first_window_loss']:.4g} = {m['loss_ratio']:.3g} > {limits.loss_ratio}"),
        ("final_loss", m["final_loss_abs_diff"] <= band,
         {"final_loss_rel_diff": m["final_loss_rel_diff"],
          "final_loss_abs_diff": m["final_loss_abs_diff"]},
         {"final_loss_rel_diff": lower(rel=2.0, abs=0.03)},
         f"final-window loss {m['final_window_loss']:.4g} vs reference "
         f"{m['ref_final_window_loss']:.4g}: |diff| {m['final_loss_abs_diff']:.3g} outside "
         f"the band {band:.3g} (max({limits.final_loss_abs}, {limits.final_loss_rel:.0%} of "
         "the reference))"),
        ("accuracy", m["accuracy_gap_points"] <= limits.accuracy_points,
         {"accuracy": m["accuracy"], "ref_accuracy": m["ref_accuracy"],
          "accuracy_gap_points": m["accuracy_gap_points"]},
         {"accuracy": higher(abs=2.0), "accuracy_gap_points": lower(rel=2.0, abs=2.0)},
         f"held-out accuracy {m['accuracy']:.2f}% vs reference {m['ref_accuracy']:.2f}%: "
         f"gap {m['accuracy_gap_points']:.2f} points > {limits.accuracy_points}"),
        ("skipped_steps", m["skipped_steps"] <= limits.skipped_fraction * spec.steps,
         {"skipped_steps": m["skipped_steps"]},
         {"skipped_steps": lower(rel=1.5, abs=2)},
         f"{m['skipped_steps']} of {spec.steps} steps skipped (inf/NaN), more than "
         f"{limits.skipped_fraction:.0%}; skipped steps: {dut.skipped[:20]}"),
        ("oscillation", m["oscillation_ratio"] <= limits.oscillation_ratio,
         {"oscillation_ratio": m["oscillation_ratio"], "oscillation": m["oscillation"]},
         {"oscillation_ratio": lower(rel=1.5, abs=0.3)},
         f"loss oscillates: spread of step-to-step changes over the last {spec.window} steps "
         f"{m['oscillation']:.3g} is {m['oscillation_ratio']:.2f}x the reference's "
         f"{m['ref_oscillation']:.3g} (limit {limits.oscillation_ratio}x)"),
    ]
    report = None
    for criterion, ok, metrics, rules, message in checks:
        info = {"limits": dict(vars(limits)), "steps": m["steps"]}
        if criterion == "loss_falls":
            info.update(curves)
        if not ok and report is None:
            report = localize.safe_report_text(spec.model, device, amp_dtype=amp_dtype,
                                               seed=spec.seed, scale=spec.scale)
            message = f"{message}\n{report}"
        results.check(f"{base}/{criterion}", ok, message, metrics=metrics, rules=rules,
                      info=info)
