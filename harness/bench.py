"""Noise-aware timing: repeated samples, median and spread, device-synchronised.

A benchmark record stores the median (``ms``) and its spread (``ms.spread``: the
median absolute deviation scaled to a standard deviation). Its rule
(:func:`timing_rule`) flags a slow-down only when the median grew past a ratio *and* the
change exceeds several combined spreads, so noise is not reported and real slow-downs
are (Note [noise-aware rules] in :class:`harness.results.Rule`).
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Callable

from harness.results import Rule, lower

MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution -> its standard deviation


@dataclasses.dataclass(frozen=True)
class Timing:
    samples_ms: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def spread(self) -> float:
        centre = self.median
        return MAD_TO_SIGMA * statistics.median(abs(s - centre) for s in self.samples_ms)

    def metrics(self) -> dict[str, float]:
        return {"ms": self.median, "ms.spread": self.spread, "ms.min": min(self.samples_ms)}


def timing_rule(rel: float = 1.25, noise: float = 4.0) -> dict[str, Rule]:
    """Slower by more than ``rel`` and by more than ``noise`` combined spreads."""
    return {"ms": lower(rel=rel, noise=noise)}


def measure(fn: Callable[[], object], device, *, warmup: int = 3, repeat: int = 15) -> Timing:
    """Time ``fn`` ``repeat`` times after ``warmup`` calls, synchronising the device."""
    for _ in range(warmup):
        fn()
    device.synchronize()
    samples = []
    for _ in range(repeat):
        timer = device.event_timer()
        timer.start()
        fn()
        timer.stop()
        device.synchronize()
        samples.append(timer.elapsed_ms())
    return Timing(tuple(samples))
