"""Noise-aware benchmark comparison: noise does not alert, a real slow-down does."""

import random

import pytest

from harness import regress
from harness.bench import Timing, measure, timing_rule
from harness.device import Device


def _timing(centre, jitter, seed, n=15):
    rng = random.Random(seed)
    return Timing(tuple(centre * (1 + rng.gauss(0, jitter)) for _ in range(n)))


def _verdict(old, new):
    rule = timing_rule()["ms"]
    old_m, new_m = old.metrics(), new.metrics()
    return regress.judge(old_m["ms"], new_m["ms"], rule, old_m["ms.spread"], new_m["ms.spread"])


@pytest.mark.parametrize("seed", range(20))
def test_noise_alone_never_alerts(seed):
    # 30% jitter: a noisy machine; medians may differ by 25%+, spreads absorb it
    assert _verdict(_timing(10.0, 0.3, seed), _timing(10.0, 0.3, seed + 100)) is None


@pytest.mark.parametrize("seed", range(5))
def test_real_slowdown_alerts(seed):
    assert _verdict(_timing(10.0, 0.02, seed), _timing(14.0, 0.02, seed + 100)) == "regression"


def test_small_real_change_within_ratio_does_not_alert():
    assert _verdict(_timing(10.0, 0.01, 1), _timing(11.0, 0.01, 2)) is None


def test_measure_collects_the_requested_samples():
    calls = []
    timing = measure(lambda: calls.append(1), Device("cpu"), warmup=2, repeat=5)
    assert len(calls) == 7 and len(timing.samples_ms) == 5 and timing.spread >= 0
