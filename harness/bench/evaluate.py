"""``python -m harness bench-eval``: the detector measured, this engine beside pytest-benchmark's.

Note [Measuring the detector]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
``3 N`` process runs of the benchmark family, interleaved (baseline i, A/A i, fault i,
so drift of the machine's load hits all three alike): ``N`` baseline runs, ``N`` A/A
runs (no change) and ``N`` runs with the whole-step slow-down fault
(``bench.slow_step_<p>``, Note [Proportional slow-downs]). Then, per benchmark:

* this engine: the baseline is the last ``keep`` baseline runs (what a stored baseline
  holds: the last 10); comparison ``i`` judges ``compare_runs`` consecutive runs
  ``i, i+1, ...`` (cyclically) as one ``--bench-runs`` compare would, N comparisons for
  A/A and N for the fault. A false alarm is a ``regression`` verdict on A/A runs; a
  detection is a ``regression`` on fault runs.
* pytest-benchmark: ``--benchmark-compare-fail=median:10%`` (its own
  :class:`~pytest_benchmark.utils.PercentageRegressionCheck`) on run ``i`` against
  baseline run ``i``, one saved run against one new run as it is used, on the same
  samples (each run's median of its rounds).

``jobs=3`` runs the three phases of a round side by side (they share the machine's
conditions; on a contended host this triples throughput, and the CPU clock the CPU's
benchmarks judge is not inflated by the sharing); ``jobs=1`` runs them one after another.
Runs already kept in ``keep_dir`` are reused, so an interrupted measurement resumes.

The ratio column is the measured slow-down (median fault run / median baseline run).
A ``ratio`` benchmark (the checkpointing time ratio: checkpointed step / plain step) is
judged for false alarms only: a whole-step slow-down slows numerator and denominator
alike, so its ratio is unchanged by design and "detected" does not apply (``n/a``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from harness import stopping
from harness.bench.runs import CHILD_ENV, read_runs
from harness.bench.stats import Policy, judge, robust_spread
from harness.bench.timing import run_controls, run_values
from harness.results import results_files

PHASES = ("baseline", "aa", "fault")
PYTEST_BENCHMARK_RULE = "median:10%"


def fault_for(slowdown: float) -> str:
    """The whole-step fault of a slow-down (``0.15`` -> ``bench.slow_step_15``)."""
    from harness.faults.catalog.bench import SLOWDOWNS

    percent = round(slowdown * 100)
    if percent not in SLOWDOWNS or abs(percent - slowdown * 100) > 1e-6:
        raise ValueError(f"--slowdown {slowdown}: the bench faults slow by "
                         f"{', '.join(f'0.{p:02d}' for p in SLOWDOWNS)}")
    return f"bench.slow_step_{percent}"


def one_run(out: Path, *, root: Path, device: str, fault: Optional[str], select: Optional[str],
            scale: str, timeout: float) -> dict[str, tuple[float, Optional[float]]]:
    """One process run of the benchmark family: record id -> its run statistic and its
    host control (Note [Host control]; None where not measured)."""
    import os

    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "suites/bench",
               "-m", "benchmark", "--baseline", "off", "--results-dir", str(out), "--device",
               device, "--training-scale", scale, "--benchmark-disable-gc"]
    if fault:
        command += ["--inject-fault", fault]
    if select:
        command += ["-k", select]
    env = {k: v for k, v in os.environ.items() if k not in ("HARNESS_FAULTS", CHILD_ENV)}
    if not (out.is_dir() and results_files(out)):  # a kept run is reused (resume)
        subprocess.run(command, cwd=root, env=env, capture_output=True, text=True,
                       timeout=timeout, preexec_fn=stopping.child_preexec())
    values = {}
    for record_id, runs in read_runs(out).items():
        found, controls = run_values(runs), run_controls(runs)
        if found:
            values[record_id] = (found[-1], controls[-1])
    return values


@dataclasses.dataclass
class Row:
    benchmark: str
    spread: Optional[float]
    ratio: Optional[float]
    engine_aa: int
    engine_aa_suspicious: int
    engine_fault: int
    engine_unreliable: int
    pb_aa: int
    pb_fault: int
    comparisons: int
    runs_needed: Optional[int]
    detectable: bool = True  # False: a ratio, which a whole-step slow-down leaves unchanged
    runs_measured: Optional[int] = None  # fewest compare runs meeting the target, measured

    @property
    def unreliable(self) -> bool:
        return self.engine_unreliable > self.comparisons  # most of the 2 N judgements

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "unreliable": self.unreliable}


def runs_needed(spread: float, slowdown: float, keep: int, policy: Policy,
                limit: int = 50) -> Optional[int]:
    """The fewest compare runs that detect ``slowdown`` at this spread (None: > limit)."""
    from scipy.stats import t as t_dist

    s = max(spread, 0.01)
    effect = math.log1p(slowdown)
    if effect <= policy.sigmas * s * math.sqrt(1 + 1 / keep):
        return None  # a single run cannot clear the violation bound: more baseline runs
    for n in range(2, limit + 1):
        if effect / (s * math.sqrt(1 / n + 1 / keep)) > t_dist.ppf(1 - policy.alpha, keep - 1):
            return n
    return None


TARGET_DETECTED = 0.95  # >= 19 of 20 (issue 12's target), with no false alarm
MAX_MEASURED_RUNS = 6


def _counts(stored, aa, fault, ctl, policy, n: int, runs: int, keep: int) -> dict:
    """Verdict counts of the N comparisons of ``runs`` consecutive runs each."""
    counts = {"aa": 0, "aa_s": 0, "fault": 0, "unreliable": 0, "spreads": []}
    for i in range(n):
        for phase, series in (("aa", aa), ("fault", fault)):
            picks = [(i + j) % len(series) for j in range(runs)]
            verdict = judge(stored, [series[k] for k in picks], policy, controls=(
                ctl["baseline"][-keep:], [ctl[phase][k] for k in picks]))
            counts["unreliable"] += verdict.verdict == "unreliable"
            if verdict.spread is not None:
                counts["spreads"].append(verdict.spread)
            if verdict.verdict == "regression":
                counts[phase] += 1
            elif verdict.verdict == "suspicious" and phase == "aa":
                counts["aa_s"] += 1
    return counts


def _meets(counts: dict, n: int, detectable: bool) -> bool:
    """No false alarm and >= 95% detections (false alarms only for a ratio benchmark)."""
    return counts["aa"] == 0 and (not detectable
                                  or counts["fault"] >= math.ceil(TARGET_DETECTED * n))


def measured_runs(stored, aa, fault, ctl, policy, n: int, keep: int, *, start: int,
                  first: dict, detectable: bool) -> Optional[int]:
    """The fewest compare runs (``start`` .. :data:`MAX_MEASURED_RUNS`) whose N
    comparisons meet the target; ``first``: the counts at ``start``, already judged.
    None when no count up to the limit does, or the benchmark is unreliable."""
    counts = first
    for runs in range(start, min(MAX_MEASURED_RUNS, n) + 1):
        if runs > start:
            counts = _counts(stored, aa, fault, ctl, policy, n, runs, keep)
        if counts["unreliable"] > n:
            return None
        if _meets(counts, n, detectable):
            return runs
    return None


def judge_all(values: dict[str, dict[str, list[float]]], *, keep: int, compare_runs: int,
              slowdown: float, policies: Optional[dict] = None,
              ratios: frozenset = frozenset(),
              controls: Optional[dict[str, dict[str, list]]] = None) -> list[Row]:
    """The table rows from ``phase -> record id -> per-run values`` (Note [Measuring ...]);
    ``controls`` (same layout): each run's host control, for the verdict's host
    adjustment (Note [Host adjustment])."""
    from pytest_benchmark.utils import parse_compare_fail

    check = parse_compare_fail(PYTEST_BENCHMARK_RULE)
    rows = []
    for record_id in sorted(values["baseline"]):
        base = values["baseline"][record_id]
        aa, fault = values["aa"].get(record_id, []), values["fault"].get(record_id, [])
        n = min(len(base), len(aa), len(fault))
        if n == 0:
            continue
        policy = (policies or {}).get(record_id, Policy())
        stored = base[-keep:]
        ctl = {phase: (controls or {}).get(phase, {}).get(record_id) or [None] * len(series)
               for phase, series in (("baseline", base), ("aa", aa), ("fault", fault))}
        counts = _counts(stored, aa, fault, ctl, policy, n, compare_runs, keep)
        spreads = counts["spreads"]
        pb = {phase: sum(bool(check.fails({"median": series[i]}, {"median": base[i]}))
                         for i in range(n)) for phase, series in (("aa", aa), ("fault", fault))}
        spread = statistics.median(spreads) if spreads else robust_spread(
            [math.log(v) for v in stored])
        ratio = statistics.median(fault) / statistics.median(base)
        rows.append(Row(record_id, spread, ratio, counts["aa"], counts["aa_s"], counts["fault"],
                        counts["unreliable"], pb["aa"], pb["fault"], n,
                        runs_needed(spread, slowdown, len(stored), policy),
                        detectable=record_id not in ratios,
                        runs_measured=measured_runs(stored, aa, fault, ctl, policy, n, keep,
                                                    start=compare_runs, first=counts,
                                                    detectable=record_id not in ratios)))
    return rows


def table(rows: Sequence[Row], *, n: int, slowdown: float, compare_runs: int) -> str:
    """The side-by-side Markdown table (docs/benchmarks.md keeps one)."""
    pct = f"{slowdown:.0%}"
    head = (f"| benchmark | baseline spread | measured ratio | engine A/A false alarms | "
            f"engine {pct} detected | unreliable | runs needed (spread) | "
            f"runs needed (measured) | pytest-benchmark A/A | pytest-benchmark {pct} |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        flag = "yes" if r.unreliable else f"{r.engine_unreliable}/{2 * r.comparisons}"
        needed = "-" if r.runs_needed is None else str(r.runs_needed)
        found = f"{r.engine_fault}/{r.comparisons}" if r.detectable else "n/a (ratio)"
        if not r.detectable:
            needed = "n/a"
        measured = "-" if r.runs_measured is None else str(r.runs_measured)
        pb_found = f"{r.pb_fault}/{r.comparisons}" if r.detectable else "n/a (ratio)"
        lines.append(f"| `{r.benchmark}` | {r.spread:.1%} | {r.ratio:.3f} | "
                     f"{r.engine_aa}/{r.comparisons} ({r.engine_aa_suspicious} suspicious) | "
                     f"{found} | {flag} | {needed} | {measured} | "
                     f"{r.pb_aa}/{r.comparisons} | {pb_found} |")
    usable = [r for r in rows if not r.unreliable]
    found_in = [r for r in usable if r.detectable]
    pb_in = [r for r in rows if r.detectable]
    lines.append("")
    lines.append(f"N = {n} process runs per phase; engine: {compare_runs} runs per compare "
                 f"vs the last 10 baseline runs; pytest-benchmark: one run vs one run, "
                 f"{PYTEST_BENCHMARK_RULE}. Totals over the {len(usable)} reliable benchmarks: "
                 f"engine false alarms {sum(r.engine_aa for r in usable)}"
                 f"/{sum(r.comparisons for r in usable)}, detections "
                 f"{sum(r.engine_fault for r in found_in)}"
                 f"/{sum(r.comparisons for r in found_in)}; pytest-benchmark (every "
                 f"benchmark) false alarms {sum(r.pb_aa for r in rows)}"
                 f"/{sum(r.comparisons for r in rows)}, detections "
                 f"{sum(r.pb_fault for r in pb_in)}/{sum(r.comparisons for r in pb_in)}. "
                 f"Unreliable: {len(rows) - len(usable)} of {len(rows)}.")
    return "\n".join(lines)


def main(*, runs: int, slowdown: float = 0.15, as_json: bool = False, root: Path,
         device: str = "cpu", select: Optional[str] = None, scale: str = "small",
         compare_runs: int = 2, keep: int = 10, timeout: float = 600.0,
         keep_dir: Optional[Path] = None, jobs: int = 1,
         progress: Optional[Callable[[str], None]] = None) -> int:
    """Run the measurement (Note [Measuring the detector]) and print the table."""
    from harness.bench.workloads import WORKLOADS, policy_for

    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    fault = fault_for(slowdown)
    values: dict[str, dict[str, list[float]]] = {p: {} for p in PHASES}
    controls: dict[str, dict[str, list]] = {p: {} for p in PHASES}
    with tempfile.TemporaryDirectory(prefix="harness-bench-eval-") as tmp:
        work = keep_dir or Path(tmp)
        start = time.monotonic()
        for i in range(runs):
            def run(phase, i=i):
                return one_run(work / phase / f"run{i:03d}", root=root, device=device,
                               fault=fault if phase == "fault" else None, select=select,
                               scale=scale, timeout=timeout)

            if jobs > 1:  # the three phases of round i side by side: equal conditions
                with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
                    found_all = list(pool.map(run, PHASES))
            else:
                found_all = [run(phase) for phase in PHASES]
            for phase, found in zip(PHASES, found_all):
                for record_id, (value, control) in found.items():
                    values[phase].setdefault(record_id, []).append(value)
                    controls[phase].setdefault(record_id, []).append(control)
            say(f"[bench-eval] round {i + 1}/{runs} (baseline, A/A, {fault}): "
                f"{time.monotonic() - start:.0f} s elapsed")
    policies = {record_id: policy_for(record_id) for record_id in values["baseline"]}
    ratios = frozenset(w.id for w in WORKLOADS if w.kind == "ratio")
    rows = judge_all(values, keep=keep, compare_runs=compare_runs, slowdown=slowdown,
                     policies=policies, ratios=ratios, controls=controls)
    doc = {"runs": runs, "slowdown": slowdown, "fault": fault, "compare_runs": compare_runs,
           "rows": [r.to_json() for r in rows], "values": values, "controls": controls}
    if keep_dir is not None:
        (keep_dir / "bench-eval.json").write_text(json.dumps(doc, indent=1))
    if as_json:
        print(json.dumps(doc, indent=1))
    else:
        print(table(rows, n=runs, slowdown=slowdown, compare_runs=compare_runs))
    return 0 if rows else 1
