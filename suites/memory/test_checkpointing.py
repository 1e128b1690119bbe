"""Gradient checkpointing: peak memory of one training step per block vs none.

For each model (deep MLP, SimpleCNN, ResNet) and each ``torch.utils.checkpoint`` mode
(non-reentrant, reentrant): the checkpointed step's peak must be at most the stated
ratio (:data:`harness.memory.cases.CASES`) of the plain step's, and its gradients must
equal the plain step's (bitwise on CPU, within tolerance elsewhere), dropout included:
the checkpoint restores the RNG state before recomputing, so the masks match.
"""

from __future__ import annotations

import pytest

from harness import ids, memory
from harness.results import lower

MODELS = ("mlp", "cnn", "resnet")
MODES = ("non_reentrant", "reentrant")
STEP_SEED = 4321


def plain_and(device, case, mode, cache):
    """The plain step (computed once per model) and the step in ``mode``."""
    inputs, target = memory.deterministic_batch(case.sample, case.classes, case.batch)
    model = memory.seeded_model(case.build).to(device.torch_device)
    out = {}
    for which in ("none", mode):
        key = ("ckpt", case.name, which)
        if key not in cache:
            cache[key] = memory.measure_step(device, memory.copy_model(model), inputs, target,
                                             checkpoint=which, seed=STEP_SEED)
        out[which] = cache[key]
    return out["none"], out[mode]


def grad_mismatch(device, plain: dict, other: dict) -> tuple[int, float, list[str]]:
    """Elements that differ (bitwise on CPU; beyond rtol 1e-5 / atol 1e-6 elsewhere)."""
    missing = sorted(set(plain) ^ set(other))
    count, worst = 0, 0.0
    for name in set(plain) & set(other):
        a, b = plain[name], other[name]
        diff = (a.double() - b.double()).abs()
        if device.type == "cpu":
            bad = a != b
        else:
            bad = diff > 1e-6 + 1e-5 * a.double().abs()
        count += int(bad.sum())
        worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
    return count, worst, missing


@pytest.mark.memory
@pytest.mark.parametrize("model_name", MODELS)
def test_plain_step_peak(device, results, cases, memory_cache, model_name):
    case = cases[model_name]
    plain, _ = plain_and(device, case, "none", memory_cache)
    results.check(ids.record("memory", "checkpoint", model_name, "float32", "none"),
                  plain.peak > 0 and bool(plain.grads),
                  f"plain step of {model_name} measured no memory (peak {plain.peak}) or "
                  "produced no gradients",
                  metrics={"peak_bytes": plain.peak},
                  rules={"peak_bytes": lower(rel=1.05, abs=4096, severity="regression")},
                  info={"batch": case.batch, "loss": plain.loss})


@pytest.mark.memory
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model_name", MODELS)
def test_checkpoint_saving(device, results, cases, memory_cache, model_name, mode):
    case = cases[model_name]
    plain, ckpt = plain_and(device, case, mode, memory_cache)
    ratio = ckpt.peak / plain.peak
    stated = case.max_ratio[mode]
    mismatched, worst, missing = grad_mismatch(device, plain.grads, ckpt.grads)
    problems = []
    if ratio > stated:
        problems.append(f"peak with {mode} checkpointing is {ratio:.3f} of the plain step's "
                        f"({memory.fmt_bytes(ckpt.peak)} vs {memory.fmt_bytes(plain.peak)}); "
                        f"stated maximum {stated}")
    if mismatched or missing:
        how = "bitwise" if device.type == "cpu" else "rtol 1e-5, atol 1e-6"
        problems.append(f"gradients differ from the plain step's: {mismatched} elements "
                        f"mismatched ({how}), worst |diff| {worst:.3g}"
                        + (f", parameters without a gradient in one of them: {missing}"
                           if missing else "")
                        + " (dropout masks not restored on recomputation?)")
    results.check(
        ids.record("memory", "checkpoint", model_name, "float32", mode), not problems,
        f"{model_name} ({device.type}, float32, batch {case.batch}): " + "; ".join(problems),
        metrics={"peak_bytes": ckpt.peak, "ratio": ratio, "grad_mismatch": mismatched},
        rules={"peak_bytes": lower(rel=1.05, abs=4096, severity="regression"),
               "ratio": lower(rel=1.05, abs=0.01),
               "grad_mismatch": lower(rel=1.0, abs=0)},
        info={"batch": case.batch, "plain_peak_bytes": plain.peak, "stated_max_ratio": stated,
              "loss": ckpt.loss, "plain_loss": plain.loss, "grad_max_abs_diff": worst})


@pytest.mark.memory
def test_checkpoint_restores_dropout_rng(device, results, cases):
    """Dropout > 0 inside a checkpointed block: masks must match the plain step's.

    A control: the same step with ``preserve_rng_state=False`` semantics (the RNG
    advanced before recomputation) must *differ*, proving dropout is active and the
    comparison can see a mask change.
    """
    case = cases["mlp"]
    inputs, target = memory.deterministic_batch(case.sample, case.classes, 32)
    model = memory.seeded_model(case.build).to(device.torch_device)
    plain = memory.measure_step(device, memory.copy_model(model), inputs, target,
                                checkpoint="none", seed=STEP_SEED)
    ckpt = memory.measure_step(device, memory.copy_model(model), inputs, target,
                               checkpoint="non_reentrant", seed=STEP_SEED)
    other = memory.measure_step(device, memory.copy_model(model), inputs, target,
                                checkpoint="none", seed=STEP_SEED + 1)
    same, _, _ = grad_mismatch(device, plain.grads, ckpt.grads)
    control, _, _ = grad_mismatch(device, plain.grads, other.grads)
    results.check(ids.record("memory", "checkpoint", "mlp", "float32", "dropout_rng"), same == 0 and control > 0,
                  f"checkpointed dropout: {same} gradient elements differ from the plain "
                  f"step (want 0); another seed's masks change {control} (want > 0)",
                  metrics={"grad_mismatch": same, "control_mismatch_nonzero": control > 0},
                  rules={"grad_mismatch": lower(rel=1.0, abs=0)})
