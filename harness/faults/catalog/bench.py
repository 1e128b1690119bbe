"""Benchmark faults: realistic slow-downs, proportional to the slowed work's own time.

Note [Proportional slow-downs]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A fault that sleeps 200 ms per call is a 100x slow-down and proves nothing about the
10-20% regressions an upgrade really brings. These time what they slow and then spin
(busy-wait, as a slower kernel would occupy the device) for ``fraction`` of it:

Both the timing and the spin use the clock the benchmark is judged in
(:func:`harness.bench.timing.judged_clock`): the process's CPU time for work in this
process on the CPU, wall time for work in other processes (DataLoader workers, the
all_reduce ranks' collective) and on accelerators. Spun in CPU time, a 15% fault slowed
the DataLoader with two workers by 8% of its wall time; in the clock it is judged in,
by 15%.

* ``bench.slow_step_<p>``: the whole DUT scope. The timing glue enters one outermost
  DUT scope per timed round (Note [A timed round] in :mod:`harness.bench.timing`), so
  every round of every benchmark is ``p`` percent slower, with no per-op overhead.
* ``bench.slow_mm_<p>``: one op, ``aten.mm``, through a dispatch mode that synchronises,
  times the op and spins. The mode itself costs a few microseconds per dispatched op,
  so the mm benchmark is the one to check (one op per step).
* ``bench.amp_slow_15``: the whole round, but only when an autocast region was entered
  in it: a throughput regression under AMP only (fp32 steps keep their speed).
* ``bench.fp32_step_slow_60``: the parity fault (``parity="speed"``, Note [Parity
  faults] in :mod:`harness.faults.check`). Rounds that entered no (enabled) autocast
  region take 60% longer, AMP rounds keep their speed: a device whose matrix units are
  built for fp16 (an Ascend's cube units), with an fp32 step well below the reference's
  throughput and an AMP step on par. A parity comparison judges throughput ratios against
  0.8x (two hosts' speeds differ by more than one host's noise), so the parity fault is
  large; not larger, because the host control runs right after the spin: after a 100%
  spin it ran 37% slower (Intel Xeon, AVX-512) and the verdict rightly calls such a run
  suspicious, not a regression (Note [Host control] in :mod:`harness.bench.timing`).
  Measured against a 4-run baseline: fp32 step 9.8 -> 17.3 ms (host-adjusted 1.54x,
  regression), the bf16 step 1.03x (ok).

The checks run with ``--bench-runs 4`` (clean baseline and fault run alike) since a
single process run is at most ``suspicious`` (Note [Bench verdict]).
"""

from __future__ import annotations

import contextlib
import time
from typing import Optional

from harness.faults import Fault

BENCH_ARGS = ("--run-benchmarks", "--bench-runs", "4")
MM_CHECK = "suites/bench/test_throughput.py::test_benchmark[op/mm/float32/n256]"
STEP_CHECKS = (MM_CHECK,
               "suites/bench/test_throughput.py::test_benchmark[op/conv2d/float32/fwd_bwd/"
               "n8c16hw32k32]")
AMP_CHECK = "suites/bench/test_throughput.py::test_benchmark[train/simplecnn/bfloat16-amp/step]"


def spin(seconds: float, clock=time.perf_counter) -> None:
    """Busy-wait until ``clock`` advanced ``seconds`` (a sleep would free the core, which a
    slow kernel does not)."""
    end = clock() + seconds
    while clock() < end:
        pass


def clock_of(device):
    """The clock a slow-down is proportional in: the one the benchmark is judged in
    (CPU time for in-process CPU work, so a spin on a contended host gets the share of
    the core the work got; wall time for other processes' work and on accelerators)."""
    from harness.bench.timing import judged_clock

    return judged_clock(device)


@contextlib.contextmanager
def _slower_scope(device, fraction: float, *, amp: Optional[bool] = None):
    """Every round ``fraction`` slower; with ``amp`` True only rounds that entered an
    autocast region, with False only rounds that did not."""
    import torch

    entered = []
    klass = torch.amp.autocast_mode.autocast
    original = klass.__enter__

    def enter(self):
        if getattr(self, "_enabled", True):  # autocast(enabled=False) is an fp32 region
            entered.append(True)
        return original(self)

    if amp is not None:
        klass.__enter__ = enter
    clock = clock_of(device)
    start = clock()
    try:
        yield
        device.synchronize()
        if amp is None or bool(entered) == amp:
            spin(fraction * (clock() - start), clock)
    finally:
        if amp is not None:
            klass.__enter__ = original


def _slow_op_mode(device, op: str, fraction: float):
    from torch.utils._python_dispatch import TorchDispatchMode

    class SlowOp(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if op not in (str(func), str(func.overloadpacket)):
                return func(*args, **(kwargs or {}))
            clock = clock_of(device)
            device.synchronize()
            start = clock()
            out = func(*args, **(kwargs or {}))
            device.synchronize()
            spin(fraction * (clock() - start), clock)
            return out

    return SlowOp()


def slow_step(percent: int, checks=STEP_CHECKS) -> Fault:
    fraction = percent / 100
    return Fault(f"bench.slow_step_{percent}", "bench",
                 f"every timed round (the whole step) takes {percent}% longer",
                 tuple(checks), lambda device: _slower_scope(device, fraction), BENCH_ARGS,
                 exclusive=True, effect=fraction)


def slow_mm(percent: int) -> Fault:
    fraction = percent / 100
    return Fault(f"bench.slow_mm_{percent}", "bench",
                 f"aten.mm takes {percent}% longer (its own time, measured per call)",
                 (MM_CHECK,), lambda device: _slow_op_mode(device, "aten.mm", fraction),
                 BENCH_ARGS, exclusive=True, effect=fraction)


AMP_SLOW = Fault("bench.amp_slow_15", "bench",
                 "steps under autocast (AMP) take 15% longer; fp32 steps keep their speed",
                 (AMP_CHECK,),
                 lambda device: _slower_scope(device, 0.15, amp=True), BENCH_ARGS,
                 exclusive=True, effect=0.15)

FP32_CHECK = "suites/bench/test_throughput.py::test_benchmark[train/simplecnn/float32/step]"
FP32_SLOW = Fault(
    "bench.fp32_step_slow_60", "bench",
    "fp32 training steps take 60% longer; steps under autocast (AMP) keep their speed",
    (FP32_CHECK, AMP_CHECK), lambda device: _slower_scope(device, 0.6, amp=False),
    BENCH_ARGS, exclusive=True, parity="speed", effect=0.6)

SLOWDOWNS = (8, 10, 15, 30)  # bench-eval --effect: 8% is an upgrade's typical regression
MM_SLOWDOWNS = (10, 15, 30)
FAULTS = [*(slow_step(p) for p in SLOWDOWNS), *(slow_mm(p) for p in MM_SLOWDOWNS), AMP_SLOW,
          FP32_SLOW]
