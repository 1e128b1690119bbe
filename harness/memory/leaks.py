"""Leaks: live bytes after each of several training steps, under one meter."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from harness.memory.collect import release, young_gc
from harness.memory.meter import MemoryMeter


@dataclasses.dataclass
class LeakProfile:
    """Live bytes after each measured step (relative to the meter's start)."""

    levels: list[int]
    summary: str

    @property
    def growth_per_step(self) -> float:
        if len(self.levels) < 2:
            return 0.0
        return (self.levels[-1] - self.levels[0]) / (len(self.levels) - 1)

    @property
    def total_growth(self) -> int:
        return self.levels[-1] - self.levels[0] if self.levels else 0


def leak_profile(device, step: Callable[[], Any], *, warmup: int, steps: int) -> LeakProfile:
    """Run ``warmup`` then ``steps`` steps under one meter; live bytes after each step.

    ``steps + 1`` levels: after the warm-up, then after each measured step.
    """
    meter = MemoryMeter(device)
    with young_gc(), meter:
        with device.scope():
            for _ in range(warmup):
                step()
        release()
        levels = [meter.current]
        for _ in range(steps):
            with device.scope():
                step()
            release()
            levels.append(meter.current)
        summary = meter.summary()
    return LeakProfile(levels, summary)
