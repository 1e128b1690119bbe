"""Leaks: K training steps after a warm-up leave live memory flat.

Three step kinds: plain fp32, AMP (``device.autocast``: bfloat16 on CPU, float16
elsewhere) and per-block checkpointed. Momentum SGD creates its state during the
warm-up, so any growth after it is a leak; the failure message carries the growth per
step and the device's memory summary (the tracker's own on CPU).
"""

from __future__ import annotations

import pytest
import torch

from harness import dtypes, ids, memory
from harness.results import lower

KINDS = ("plain", "amp", "checkpoint")


@pytest.mark.memory
@pytest.mark.parametrize("kind", KINDS)
def test_no_leak_per_step(device, results, cases, memory_limits, kind):
    limits = memory_limits
    case = cases[limits.leak_model]
    model = memory.seeded_model(case.build).to(device.torch_device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    inputs, target = memory.deterministic_batch(case.sample, case.classes, limits.leak_batch)
    amp = device.amp_dtype  # the device kind's preferred autocast dtype
    losses: list[float] = []

    def step() -> None:
        losses.append(memory.train_step(
            device, model, optimizer, inputs, target,
            checkpoint="non_reentrant" if kind == "checkpoint" else "none",
            amp_dtype=amp if kind == "amp" else None))

    profile = memory.leak_profile(device, step, warmup=limits.warmup, steps=limits.steps)
    backend = memory.MemoryMeter(device).backend
    tolerance = limits.leak_tolerance[backend]
    growth = profile.growth_per_step
    finite = all(torch.isfinite(torch.tensor(losses)).tolist())
    problems = []
    if growth > tolerance:
        problems.append(f"live memory grows {memory.fmt_bytes(growth)} per step over "
                        f"{limits.steps} steps after {limits.warmup} warm-up steps "
                        f"(allowed {tolerance} bytes); levels after each step: "
                        f"{profile.levels}")
    if not finite:
        problems.append(f"non-finite losses: {losses}")
    results.check(
        ids.record("memory", "leak", case.name, 'float32' if kind != 'amp' else dtypes.name(amp), kind),
        not problems,
        f"{kind} step leaks: " + "; ".join(problems) + f"\nmemory summary:\n{profile.summary}",
        metrics={"growth_per_step": growth},
        rules={"growth_per_step": lower(rel=1.0, abs=max(tolerance, 1))},
        info={"levels": profile.levels, "backend": backend, "losses": losses})
