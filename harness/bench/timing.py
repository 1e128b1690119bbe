"""Timing through pytest-benchmark, with the device synchronised inside each round.

Note [A timed round]
~~~~~~~~~~~~~~~~~~~~
pytest-benchmark's ``benchmark.pedantic`` runs the rounds, keeps the host timer, the
statistics and its JSON (``--benchmark-json``, ``--benchmark-save``). A round here is
``inner`` calls of the workload's step inside one outermost DUT scope (so faults apply,
and a whole-step fault sees the round), followed by ``device.synchronize()`` inside the
round: host time then includes the device's work. The device clocks start before the
scope is entered and stop after it is left, so what a fault does on leaving it counts. On accelerators a device event pair
around the steps gives the device time; on the CPU the device time is the process's CPU
time (``time.process_time``), which a neighbour preempting the process does not
inflate: that is the statistic the verdict judges unless a workload says
``clock="host"``. Host >> device (beyond
:data:`HOST_BOUND_RATIO`) means the round is dominated by launch overhead or host work
(flagged ``host_bound``); device > host means the synchronisation is missing (the host
timer stopped before the device finished: flagged ``sync_missing``). ``inner`` is
calibrated here (not by pytest-benchmark) so that a round lasts at least
:data:`MIN_ROUND_S`: pytest-benchmark's own calibration would call the step repeatedly
without a sync between calls. The number of rounds follows from the time budget.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import os
import statistics
import time
from typing import Callable, Iterator, Optional

from harness.bench.stats import MAD_TO_SIGMA
from harness.results import Rule, lower

MIN_ROUND_S = 0.002
HOST_BOUND_RATIO = 1.5
DEFAULT_BUDGET_S = 0.4
MIN_ROUNDS, MAX_ROUNDS = 5, 400  # rounds fill the budget: Note [Quiet rounds]
SLOW_STEP_S = 0.02  # steps slower than this get no extra warm-up round
THREADS_ENV = "HARNESS_BENCH_THREADS"
CPU_THREADS = 1
PIN_ENV = "HARNESS_BENCH_CPU"


@dataclasses.dataclass
class RunStat:
    """One process run of one benchmark: the statistic the verdict uses (``value``)."""

    value: float                  # median ms per step (or a ratio for ratio benchmarks)
    spread: float = 0.0           # within-run robust spread, same unit
    rounds: int = 0
    inner: int = 1
    device_ms: Optional[float] = None
    pid: int = dataclasses.field(default_factory=os.getpid)
    control_ms: Optional[float] = None  # host control, median over the kept rounds
    kept: Optional[int] = None    # rounds kept by Note [Quiet rounds]; None: all

    def to_json(self) -> dict:
        out = {"value": self.value, "spread": self.spread, "rounds": self.rounds,
               "inner": self.inner, "pid": self.pid}
        if self.kept is not None:
            out["kept"] = self.kept
        if self.device_ms is not None:
            out["device_ms"] = self.device_ms
        if self.control_ms is not None:
            out["control_ms"] = self.control_ms
        return out


def _positive(value) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _usable_runs(runs) -> list[dict]:
    """The stored per-run entries (``info["runs"]``) with a usable ``value``."""
    return [run for run in runs or () if isinstance(run, dict) and _positive(run.get("value"))]


def run_values(runs) -> list[float]:
    """The ``value`` of each stored per-run entry (``info["runs"]``), skipping bad ones."""
    return [float(run["value"]) for run in _usable_runs(runs)]


def run_controls(runs) -> list[Optional[float]]:
    """The ``control_ms`` of the same entries :func:`run_values` keeps (None: not measured,
    as in baselines recorded before the control existed)."""
    return [_positive(run.get("control_ms")) for run in _usable_runs(runs)]


# Note [A simulator is timed as its host]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# SimNPU runs the CPU's kernels in this process (docs/simnpu.md), so its "device" is the
# host's CPU and its events are the host clock. Timed as an accelerator (wall time, torch's
# threads, unpinned, no host control) its benchmarks measured something else than the
# CPU's (process CPU time on one pinned thread): a cpu -> SimNPU parity pair on one
# machine put SimpleCNN's step at 0.25x the CPU's and the 256x256 mm at 0.37x, from the
# clocks and threads alone. ``Device.host_timed`` is true for the CPU and for a simulator:
# such a device is timed as the CPU is (this module's clock, threads, pinning, freed
# memory and host control), so a clean pair compares kernels with kernels. Its backward
# runs in the calling thread too, as the CPU's does (:func:`backward_in_caller`): autograd
# gives a non-CPU device a thread of its own, which on an asynchronous device overlaps the
# host; on the simulator it only hands every backward node between threads, and after
# other tests in the process had started autograd's reentrant pool, SimpleCNN's fp32 step
# on SimNPU took 12-15 ms against 9.8 ms with the backward in the caller (the CPU: 9.3-9.8).


def backward_in_caller(device):
    """While a host-timed simulator is timed: autograd runs its backward in the calling
    thread (Note [A simulator is timed as its host]); elsewhere nothing changes."""
    if not device.simulated:
        return contextlib.nullcontext()
    import torch

    return torch.autograd.set_multithreading_enabled(False)


def clock_for(device, clock: str = "device") -> Callable[[], float]:
    """The timer of ``clock`` on ``device``: the process's CPU time for the device clock on
    the CPU, wall time otherwise (Note [A timed round])."""
    return time.process_time if clock == "device" and device.host_timed \
        else time.perf_counter


_JUDGED = contextvars.ContextVar("harness_bench_judged_clock", default=None)


@contextlib.contextmanager
def judged_in(now: Callable[[], float]) -> Iterator[None]:
    """While rounds are timed: the clock their statistic is judged in (see
    :func:`judged_clock`)."""
    token = _JUDGED.set(now)
    try:
        yield
    finally:
        _JUDGED.reset(token)


def judged_clock(device) -> Callable[[], float]:
    """The clock the rounds being timed are judged in: a proportional slow-down
    (Note [Proportional slow-downs]) spins a fraction of the work's time in that clock.
    Wall time for work in other processes (DataLoader workers, all_reduce); outside timed
    rounds, the device clock of :func:`clock_for`."""
    return _JUDGED.get() or clock_for(device)


# Note [Host control]
# ~~~~~~~~~~~~~~~~~~~
# On a shared host the machine itself has slow periods of seconds to minutes (a
# neighbour's memory traffic, frequency changes): measured here, every CPU benchmark of a
# run slowed together by 10-35% for several seconds at a time, and two consecutive runs
# inside one such period look, to any statistic of those runs, like a real slow-down.
# So in every round of a benchmark whose time is host CPU work (every benchmark on the
# CPU; the DataLoader with workers on any device), pytest-benchmark's ``setup`` hook (not
# timed, outside the DUT scope, on the same pinned CPU, right before the round) times a
# *control*: two calls of a fixed numpy workload (an exp and a sum over a 256x1024 float32
# array: memory and vector work like the ops', and no torch, so no fault and no torch or
# CANN upgrade acts on it directly). The run's control is the median over its rounds:
# the same window of time as the benchmark's own median. (Timed once before and once
# after a benchmark instead, it caught short spikes the benchmark's median did not see.)
# Each round's control also picks the run's quiet rounds (Note [Quiet rounds]), and the
# verdict adjusts every run for its control (Note [Host adjustment] in
# :mod:`harness.bench.stats`). The control never makes an alert by itself. It is not
# independent of the DUT: it runs in the caches the round before it left, and under the
# 15% whole-step fault it ran 4-8% slower in 6 of the 17 benchmarks that have one; the
# adjustment learns its slope within groups, so such a shift does not enter the slope.
# (Used as a guard instead, withholding the alert when the control was 20% slower, it
# cost a fifth of the detections on this VM: docs/benchmarks.md.)

CONTROL_SHAPE = (256, 1024)
CONTROL_CALLS = 2  # per round: about 0.8 ms here


class HostControl:
    """The control of Note [Host control]: ``sample()`` once per round, ``ms()`` after."""

    def __init__(self, device, clock: str = "device") -> None:
        import numpy as np

        self._now = clock_for(device, clock)
        self._data = np.linspace(0.0, 1.0, CONTROL_SHAPE[0] * CONTROL_SHAPE[1],
                                 dtype=np.float32).reshape(CONTROL_SHAPE)
        self._np = np
        self.samples: list[float] = []
        self.sample()  # warms the caches; not kept
        self.samples.clear()

    def sample(self) -> None:
        start = self._now()
        for _ in range(CONTROL_CALLS):
            float(self._np.exp(self._data).sum())
        self.samples.append((self._now() - start) * 1e3 / CONTROL_CALLS)

    def ms(self) -> Optional[float]:
        return statistics.median(self.samples) if self.samples else None


def _mad(values) -> float:
    centre = statistics.median(values)
    return MAD_TO_SIGMA * statistics.median(abs(v - centre) for v in values)


# Note [Quiet rounds]
# ~~~~~~~~~~~~~~~~~~~
# The host's slow periods are short: timed here round by round (the 1000x64 embedding
# backward, pinned, 8 s), the host control sat at 0.41 ms and jumped to 0.68-0.73 ms for
# 0.2-0.4 s at a time, a few times in 8 s, and the step time jumped with it (correlation
# 0.82 round by round). A benchmark's 0.6 s of rounds catches part of such a spike often,
# and its median moves with how much it caught. So a run's statistic is the median of its
# *quiet* rounds: those whose host control, taken right before the round and right after
# it (the next round's setup), is within :data:`QUIET_MARGIN` of the run's quietest
# decile. When fewer than a third are, the third with the quietest controls is kept (the
# whole run was in a slow period: Note [Host adjustment] in :mod:`harness.bench.stats`
# then corrects the rest). ``RunStat.kept`` says how many rounds made the statistic.

QUIET_MARGIN = 0.10
QUIET_MIN_SHARE = 1 / 3


def quiet_rounds(controls: list[float]) -> list[int]:
    """Indices of the quiet rounds of Note [Quiet rounds], from each round's control."""
    n = len(controls)
    if n < 3:
        return list(range(n))
    host = [max(controls[i], controls[i + 1]) if i + 1 < n else controls[i] for i in range(n)]
    ordered = sorted(host)
    floor = ordered[max(0, (n - 1) // 10)]
    quiet = [i for i in range(n) if host[i] <= (1 + QUIET_MARGIN) * floor]
    least = max(3, math.ceil(n * QUIET_MIN_SHARE))
    if len(quiet) < least:
        quiet = sorted(sorted(range(n), key=host.__getitem__)[:least])
    return quiet


def calibrate(step: Callable[[], object], device, *, warmup: int = 1) -> tuple[int, float]:
    """Steps per round so a round lasts >= MIN_ROUND_S, and the seconds of one step."""
    for _ in range(warmup):
        step()
    device.synchronize()
    inner, elapsed = 1, 0.0
    while True:
        start = time.perf_counter()
        for _ in range(inner):
            step()
        device.synchronize()
        elapsed = time.perf_counter() - start
        if elapsed >= MIN_ROUND_S or inner >= 1 << 16:
            return inner, elapsed / inner
        inner *= 2 if elapsed <= 0 else max(2, min(16, int(MIN_ROUND_S / elapsed) + 1))


def bench_rounds(benchmark, step: Callable[[], object], device, *,
                 budget_s: float = DEFAULT_BUDGET_S, warmup: int = 1,
                 rounds: Optional[int] = None, clock: str = "device",
                 control: bool = False, reference: Optional[Callable[[], object]] = None
                 ) -> tuple[RunStat, dict]:
    """Time ``step`` with pytest-benchmark (Note [A timed round]).

    ``clock="device"`` judges the device's own time per step (events on accelerators,
    the process's CPU time on the CPU, which neighbours on a shared host cannot inflate
    by preempting it); ``clock="host"`` judges wall time (work in other processes:
    DataLoader workers). ``control``: time the host control before each round (Note
    [Host control]). ``reference``: a ratio benchmark's plain step, timed (same clock,
    same DUT scope, same ``inner``) right before each round, so each round is paired
    with its own reference under the same host conditions; the statistic is then the
    median of the per-round ratios. (Timed after all the rounds instead, the
    checkpointing ratio's process runs spread 5-10%.) Returns the run statistic (ms per
    step, or the ratio) and flags for ``info``.
    """
    inner, one = calibrate(step, device, warmup=warmup)
    if rounds is None:
        rounds = int(min(MAX_ROUNDS, max(MIN_ROUNDS, budget_s / max(one * inner, 1e-9))))
    device_ms: list[float] = []

    def steps(fn) -> None:  # one round's work: inside one DUT scope, synchronised
        with device.scope():
            for _ in range(inner):
                fn()
            device.synchronize()

    def one_round():
        timer = None if device.host_timed else device.event_timer()
        cpu = time.process_time()  # both clocks outside the scope: a fault's exit counts
        if timer is not None:
            timer.start()
        steps(step)
        if timer is not None:
            timer.stop()
        cpu = time.process_time() - cpu
        device_ms.append(timer.elapsed_ms() if timer is not None else cpu * 1e3)

    warm = 0 if one * inner > SLOW_STEP_S else 1
    ctl = HostControl(device, clock) if control else None
    now = clock_for(device, clock)
    ref_ms: list[float] = []

    def setup():  # not timed by pytest-benchmark
        if ctl is not None:
            ctl.sample()
        if reference is not None:
            start = now()
            steps(reference)
            ref_ms.append((now() - start) * 1e3 / inner)

    with judged_in(now):
        benchmark.pedantic(one_round, rounds=rounds, iterations=1, warmup_rounds=warm,
                           **({"setup": setup} if ctl is not None or reference is not None
                              else {}))
    if ctl is not None:
        del ctl.samples[:warm]  # the warm-up round's
    del ref_ms[:warm]
    host_ms = [s * 1e3 / inner for s in benchmark.stats.stats.data]
    dev_ms = [d / inner for d in device_ms[warm:]] or [d / inner for d in device_ms]
    rounds_run, kept, control_ms = len(host_ms), None, None
    if ctl is not None and len(ctl.samples) == len(host_ms) == len(dev_ms):
        quiet = quiet_rounds(ctl.samples)  # Note [Quiet rounds]
        host_ms, dev_ms = [host_ms[i] for i in quiet], [dev_ms[i] for i in quiet]
        if len(ref_ms) == rounds_run:
            ref_ms = [ref_ms[i] for i in quiet]
        kept = len(quiet)
        control_ms = statistics.median(ctl.samples[i] for i in quiet)
    elif ctl is not None:
        control_ms = ctl.ms()
    wall = statistics.median(host_ms)
    dev = statistics.median(dev_ms)
    use_device = clock == "device"
    values = dev_ms if use_device else host_ms
    if reference is not None:  # the per-round ratios, each round against its own reference
        values = [v / r for v, r in zip(values, ref_ms)]
    stat = RunStat(statistics.median(values), _mad(values), rounds_run, inner, device_ms=dev,
                   control_ms=control_ms, kept=kept)
    flags: dict = {"host_ms": wall, "clock": "device" if use_device else "host"}
    if reference is not None:
        flags["reference_ms"] = statistics.median(ref_ms)
    if wall > HOST_BOUND_RATIO * dev:
        flags["host_bound"] = (f"host {wall:.4g} ms >> device {dev:.4g} ms per step: " + (
            "launch overhead or host work dominates" if not device.host_timed else
            "the process waited for a CPU (a busy host) or for other processes"))
    if dev > 1.1 * wall and not device.host_timed:
        flags["sync_missing"] = (f"device {dev:.4g} ms > host {wall:.4g} ms: the round did "
                                 "not wait for the device")
    benchmark.extra_info.update({"inner": inner, "ms_per_step": stat.value, "host_ms": wall,
                                 "device_ms": dev})
    return stat, flags


# Note [One CPU per timed benchmark]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# On a shared 2-core host, a CPU benchmark's process runs came out bimodal (layer_norm
# 0.10 vs 0.17 ms, sdpa 1.1 vs 1.6 ms, the 1-element add 3.4 vs 7.4 us): the modes followed
# the CPU the process ran on (taskset: CPU 0 gave 8 of 8 runs within 2%, CPU 1 slow in 3 of
# 4 at one time), and a process that migrates between CPUs loses its caches. So while an
# in-process CPU benchmark is timed (``clock="device"``), the process is pinned to one CPU:
# the lowest of its allowed CPUs, or ``HARNESS_BENCH_CPU`` (a CPU number, or ``none`` to
# leave placement to the scheduler), as pyperf advises pinning benchmarks. Workloads timed
# in other processes get one CPU per process instead (:func:`pin_helper`): DataLoader
# worker i and all_reduce rank i run on the i-th allowed CPU (modulo their number). Left
# to the scheduler, the two all_reduce ranks' process runs spread 12.3% (4 MiB;
# bench-eval --runs 10, 19:38-19:42 UTC) and the two-worker DataLoader's 11.9%
# (19:58-20:01); pinned, 8.4% (19:42-19:45) and 9.6% (19:52-19:55). Accelerators are not
# pinned (the device does the work).


@contextlib.contextmanager
def pinned(device, clock: str = "device") -> Iterator[Optional[int]]:
    """Pin this process to one CPU while a CPU benchmark is timed (Note [One CPU per timed
    benchmark]); yields the CPU, or None when not pinned."""
    choice = os.environ.get(PIN_ENV, "").strip().lower()
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if not device.host_timed or clock != "device" or not allowed or choice == "none":
        yield None
        return
    if choice:
        try:
            cpu = int(choice)
        except ValueError:
            raise ValueError(f"{PIN_ENV}={choice!r}: give a CPU number (one of "
                             f"{sorted(allowed)}) or 'none'") from None
        if cpu not in allowed:
            raise ValueError(f"{PIN_ENV}={cpu}: this process may run on CPUs "
                             f"{sorted(allowed)} only")
    else:
        cpu = min(allowed)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, allowed)


def pin_helper(index: int, device) -> Optional[int]:
    """Pin this helper process (a DataLoader worker, an all_reduce rank) to the
    ``index``-th of its allowed CPUs, modulo their number (Note [One CPU per timed
    benchmark]); returns the CPU, or None where nothing is pinned (an accelerator,
    ``HARNESS_BENCH_CPU=none``, or no affinity on this OS)."""
    if (not device.host_timed or not hasattr(os, "sched_setaffinity")
            or os.environ.get(PIN_ENV, "").strip().lower() == "none"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[index % len(allowed)]
    os.sched_setaffinity(0, {cpu})
    return cpu


# Note [Freed memory stays in the process]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Accelerators' allocators cache freed blocks, so a training step reuses the memory of
# the one before. glibc's malloc does not for blocks over its mmap threshold: every step
# maps fresh pages (page faults, zeroing) and unmaps them again, and how much of that a
# step pays changes from process to process. Measured here (embedding backward of a
# 10000x128 table, one thread, pinned, 6 processes each): 1.9-4.5 ms per step with
# glibc's defaults, 1.6-1.9 ms with freed memory kept in the heap. So while a CPU
# benchmark is timed, ``mallopt`` raises the mmap and trim thresholds (glibc on Linux;
# elsewhere nothing changes), and restores glibc's defaults after. DataLoader workers
# forked meanwhile inherit the setting.

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_GLIBC_DEFAULT_THRESHOLD = 128 * 1024
_KEEP_FREED = 1 << 30


def _mallopt():
    """glibc's ``mallopt``, or None where there is none."""
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.mallopt
    except (OSError, AttributeError):
        return None


@contextlib.contextmanager
def freed_memory_kept(device) -> Iterator[bool]:
    """Keep freed memory in the process while a CPU benchmark is timed (Note [Freed
    memory stays in the process]); yields whether it could."""
    mallopt = _mallopt() if device.host_timed else None
    if mallopt is None:
        yield False
        return
    kept = bool(mallopt(_M_MMAP_THRESHOLD, _KEEP_FREED)) and bool(
        mallopt(_M_TRIM_THRESHOLD, _KEEP_FREED))
    try:
        yield kept
    finally:
        mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT_THRESHOLD)
        mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULT_THRESHOLD)


def bench_threads(device) -> Optional[int]:
    """Intra-op threads for benchmarks on the CPU (one, for stable timings on shared hosts:
    ``HARNESS_BENCH_THREADS`` overrides); None on accelerators (leave torch's setting)."""
    if not device.host_timed:
        return None
    return int(os.environ.get(THREADS_ENV, CPU_THREADS))


# ----------------------------------------------------------------- the old interface

@dataclasses.dataclass(frozen=True)
class Timing:
    """Samples of one process (kept for callers of the old ``harness.bench`` API)."""

    samples_ms: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def spread(self) -> float:
        return _mad(self.samples_ms)

    def metrics(self) -> dict[str, float]:
        return {"ms": self.median, "ms.spread": self.spread, "ms.min": min(self.samples_ms)}


def timing_rule(rel: float = 1.25, noise: float = 4.0) -> dict[str, Rule]:
    """The old one-process rule (ratio and combined spreads); benchmarks now use
    :func:`harness.bench.stats.judge` instead."""
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
