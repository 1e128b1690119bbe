"""OOM thresholds and OOM recovery under a memory cap.

Threshold: the largest batch whose training step completes under the cap
(:data:`harness.memory.cases.THRESHOLDS`), found by doubling then bisection, with and
without checkpointing; checkpointing must raise it by the stated factor, and a lower max
batch or a higher peak than the baseline is a regression. On accelerators the cap is the
allocator's own (``set_per_process_memory_fraction``) and the OOM is real; on CPU the
cap applies to the tracker (harness/memory/tracker.py). What counts as an OOM is
:func:`harness.memory.is_out_of_memory`'s answer for the device.

Recovery: after an OOM the device still computes, live memory is back to its level
before the attempt, and the next smaller batch trains with the same peak as before.
"""

from __future__ import annotations

import pytest
import torch

from harness import ids, memory
from harness.results import higher, lower

# (model, checkpoint mode) searches: the MLP in every mode; the ResNet (slow convolutions
# on CPU) plain and non-reentrant only, which is all its gain check needs.
SEARCHES = [("mlp", "none"), ("mlp", "non_reentrant"), ("mlp", "reentrant"),
            ("resnet", "none"), ("resnet", "non_reentrant")]
GAINS = [(model, mode) for model, mode in SEARCHES if mode != "none"]


def _ids(pairs):
    return [pytest.param(*pair, id="-".join(pair)) for pair in pairs]


def search(device, case, threshold, mode, cache) -> memory.Threshold:
    """The capped search for one model and mode (once per session)."""
    key = ("threshold", case.name, mode)
    if key in cache:
        return cache[key]
    model = memory.seeded_model(case.build).to(device.torch_device)
    allowed = cache.setdefault(("allowed",) + key[1:], {})

    def attempt(batch: int) -> int:
        inputs, target = memory.deterministic_batch(case.sample, case.classes, batch)
        step = memory.measure_step(device, model, inputs, target, checkpoint=mode,
                                   seed=batch, cap=threshold.cap)
        allowed[batch] = threshold.cap + step.slack  # Note [The cap is on reserved memory]
        return step.peak

    cache[key] = memory.max_batch_under_cap(attempt, device=device,
                                            start=threshold.start, limit=threshold.limit,
                                            resolution=threshold.resolution)
    return cache[key]


@pytest.mark.memory
@pytest.mark.parametrize(("model_name", "mode"), _ids(SEARCHES))
def test_max_batch_under_cap(device, results, cases, thresholds, memory_cache,
                             model_name, mode):
    case, threshold = cases[model_name], thresholds[model_name]
    found = search(device, case, threshold, mode, memory_cache)
    problems = []
    if found.max_batch < 1:
        problems.append(f"not even batch {threshold.start} fits under the cap")
    if found.hit_limit:
        problems.append(f"batch {threshold.limit} still fits: the cap does not bind "
                        "(raise the cap table's limit or lower the cap)")
    ref = found.peaks.get(threshold.ref_batch)
    if ref is None:
        problems.append(f"the reference batch {threshold.ref_batch} did not run or did not fit")
    allowed = memory_cache.get(("allowed", case.name, mode), {})
    over = {b: p for b, p in found.peaks.items() if p > allowed.get(b, threshold.cap)}
    if over:
        problems.append(f"completed batches peaked above the cap: {over}")
    metrics = {"max_batch": found.max_batch}
    rules = {"max_batch": higher(rel=1.0, abs=0, severity="regression")}
    if ref is not None:
        metrics[f"peak_bytes_b{threshold.ref_batch}"] = ref
        rules[f"peak_bytes_b{threshold.ref_batch}"] = lower(rel=1.05, abs=4096)
    results.check(
        ids.record("memory", "oom_threshold", model_name, "float32", mode), not problems,
        f"{model_name} {mode} under a {memory.fmt_bytes(threshold.cap)} cap: "
        + "; ".join(problems),
        metrics=metrics, rules=rules,
        info={"cap_bytes": threshold.cap, "peaks_by_batch": {str(b): p for b, p in
                                                             sorted(found.peaks.items())},
              "oom_batches": found.failed, "probes": found.probes})


@pytest.mark.memory
@pytest.mark.parametrize(("model_name", "mode"), _ids(GAINS))
def test_checkpointing_raises_max_batch(device, results, cases, thresholds, memory_cache,
                                        model_name, mode):
    case, threshold = cases[model_name], thresholds[model_name]
    record_id = ids.record("memory", "oom_threshold", model_name, "float32", f"{mode}_gain")
    why_not = memory.cap_below_segments(device, threshold.cap)
    if why_not:
        results.record(record_id, status="unsupported", message=why_not,
                       info={"reason": why_not, "cap_bytes": threshold.cap})
        return
    plain = search(device, case, threshold, "none", memory_cache)
    ckpt = search(device, case, threshold, mode, memory_cache)
    gain = ckpt.max_batch / max(plain.max_batch, 1)
    results.check(
        record_id, gain >= threshold.min_gain,
        f"{model_name}: {mode} checkpointing raises the max batch under a "
        f"{memory.fmt_bytes(threshold.cap)} cap only {gain:.2f}x "
        f"({plain.max_batch} -> {ckpt.max_batch}); stated minimum {threshold.min_gain}x",
        metrics={"gain": gain}, rules={"gain": higher(rel=1.05, abs=0.02)},
        info={"max_batch_plain": plain.max_batch, "max_batch_checkpointed": ckpt.max_batch,
              "stated_min_gain": threshold.min_gain, "cap_bytes": threshold.cap})


@pytest.mark.memory
def test_oom_recovery(device, results, cases, thresholds, memory_limits):
    """An OOM leaves the device usable, memory at its prior level, smaller batches training."""
    case, threshold = cases["mlp"], thresholds["mlp"]
    model = memory.seeded_model(case.build).to(device.torch_device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    meter = memory.MemoryMeter(device)
    tolerance = memory_limits.recovery_tolerance[meter.backend]
    meter.cap(threshold.cap)
    peaks: dict[int, int] = {}
    failed_batch, level_before, level_after, usable, smaller_peak = None, 0, 0, False, None
    with memory.young_gc(), meter:
        def step(batch: int) -> int:
            inputs, target = memory.deterministic_batch(case.sample, case.classes, batch)
            meter.reset()
            with device.scope():
                memory.train_step(device, model, optimizer, inputs, target)
            return meter.peak

        batch = threshold.start
        while batch <= threshold.limit:  # doubling until the first OOM
            for param in model.parameters():  # the level before: no gradients held
                param.grad = None
            memory.release()
            level_before = meter.current
            try:
                peaks[batch] = step(batch)
            except Exception as exc:
                if not memory.is_out_of_memory(device, exc):
                    raise
                failed_batch = batch
                break
            batch *= 2
        memory.release()
        level_after = meter.current
        if failed_batch is not None:
            with device.scope():  # the device still computes
                probe = torch.arange(16, dtype=torch.float32, device=device.torch_device)
                usable = float((probe * 2).sum().cpu()) == 240.0
            del probe
            memory.release()
            smaller = failed_batch // 2
            if smaller in peaks:
                smaller_peak = step(smaller)
    problems = []
    if failed_batch is None:
        problems.append(f"no batch up to {threshold.limit} ran out of memory under the cap")
    else:
        if level_after - level_before > tolerance:
            problems.append(f"{level_after - level_before} bytes still live after the OOM at "
                            f"batch {failed_batch} (before: {level_before}, after: "
                            f"{level_after}, allowed {tolerance})")
        if not usable:
            problems.append("the device computes wrongly after the OOM")
        smaller = failed_batch // 2
        if smaller_peak is None:
            problems.append(f"the next smaller batch {smaller} did not train after the OOM")
        elif smaller_peak > peaks[smaller] + tolerance:
            problems.append(f"batch {smaller} peaks at {smaller_peak} bytes after the OOM, "
                            f"{peaks[smaller]} before it")
    leftover = level_after - level_before
    results.check(
        ids.record("memory", "oom_recovery", "mlp", "float32"), not problems,
        "OOM recovery: " + "; ".join(problems) + f"\n{meter.summary()}",
        metrics={"leftover_bytes": leftover},
        rules={"leftover_bytes": lower(rel=1.0, abs=tolerance)},
        info={"oom_batch": failed_batch, "peaks_by_batch": {str(b): p for b, p in peaks.items()},
              "peak_after_recovery": smaller_peak, "cap_bytes": threshold.cap})
