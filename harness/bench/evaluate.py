"""``python -m harness bench-eval``: the detector measured, this engine beside pytest-benchmark's.

Note [Measuring the detector]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
``N`` rounds of process runs of the benchmark family; a round runs one process per
*phase* in turn (so drift of the machine's load hits every phase alike): the baseline,
A/A (no change), and one phase per ``--effect`` with the whole-step slow-down fault
(``bench.slow_step_<p>``, Note [Proportional slow-downs]); with ``--load`` the A/A and
slowed phases again under :func:`background_load` (one process spinning on the
benchmarks' CPU, only while those runs run). Directory ``<keep-dir>/<phase>/runNNN``
per run (``baseline``, ``aa``, ``slow8``, ``slow15``, ``aa-load``, ...). Then, per
benchmark and condition (quiet; loaded):

* this engine: the baseline is the last ``keep`` quiet baseline runs (what a stored
  baseline holds: the last 10), also for the loaded compares (the nightly case: a
  baseline recorded on a quiet machine, compares on a busy one); comparison ``i``
  judges ``compare_runs`` consecutive runs ``i, i+1, ...`` (cyclically) as one
  ``--bench-runs`` compare would: N comparisons per phase. A false alarm is a
  ``regression`` on A/A runs; a detection, a ``regression`` on slowed runs.
* the baseline's MDE with ``compare_runs`` runs (Note [Minimum detectable effect] in
  :mod:`harness.bench.stats`): what the formula promises, beside what was measured.
* pytest-benchmark: ``--benchmark-compare-fail=median:10%`` (its own
  :class:`~pytest_benchmark.utils.PercentageRegressionCheck`) on run ``i`` against
  baseline run ``i``, one saved run against one new run as it is used, on the same
  samples (each run's median of its rounds).

Runs already kept in ``keep_dir`` are reused, so an interrupted measurement resumes and a
finished one is re-judged in seconds. The ratio in a detection cell is the measured
slow-down (median slowed run / median baseline run). A ``ratio`` benchmark (the
checkpointing time ratio) is judged for false alarms only: a whole-step slow-down slows
numerator and denominator alike ("n/a").
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from harness import stopping
from harness.bench.runs import CHILD_ENV, read_runs
from harness.bench.stats import (
    COMPARE_RUNS,
    TARGET_EFFECT,
    Policy,
    baseline_mde,
    detectable_text,
    judge,
    runs_for,
)
from harness.bench.timing import run_controls, run_values
from harness.results import results_files

PYTEST_BENCHMARK_RULE = "median:10%"
EFFECTS = (0.08, 0.15)
RUNS_FOR_LIMIT = 50


def fault_for(slowdown: float) -> str:
    """The whole-step fault of a slow-down (``0.15`` -> ``bench.slow_step_15``)."""
    from harness.faults.catalog.bench import SLOWDOWNS

    percent = round(slowdown * 100)
    if percent not in SLOWDOWNS or abs(percent - slowdown * 100) > 1e-6:
        raise ValueError(f"--effect {slowdown}: the bench faults slow by "
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
class Cell:
    """One benchmark under one condition (quiet or loaded): verdict counts of its
    comparisons. ``detected``: effect -> regressions on that slow-down's runs."""

    comparisons: int
    aa: int
    aa_suspicious: int
    detected: dict[float, int]
    unreliable: int
    pb_aa: int
    pb_detected: dict[float, int]
    ratio: dict[float, float]  # effect -> median slowed run / median baseline run


@dataclasses.dataclass
class Row:
    """One benchmark of the table: its baseline's noise and MDE, and a cell per condition."""

    benchmark: str
    spread: Optional[float]     # the baseline's run-to-run spread (host-adjusted)
    mde: Optional[float]        # Note [Minimum detectable effect], with compare_runs runs
    detectable_text: str
    cells: dict[str, Cell]      # "quiet" | "loaded"
    detectable: bool = True     # False: a ratio, which a whole-step slow-down leaves unchanged
    runs_for: dict = dataclasses.field(default_factory=dict)  # effect -> compare runs (None: > 50)

    def unreliable(self, condition: str) -> bool:
        cell = self.cells[condition]
        judged = cell.comparisons * (1 + len(cell.detected))
        return cell.unreliable * 2 > judged  # most of its judgements

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["runs_for"] = {str(e): n for e, n in self.runs_for.items()}
        out["cells"] = {k: {**dataclasses.asdict(c), "detected": {str(e): n for e, n in
                                                                   c.detected.items()},
                            "pb_detected": {str(e): n for e, n in c.pb_detected.items()},
                            "ratio": {str(e): r for e, r in c.ratio.items()},
                            "unreliable": self.unreliable(k)}
                        for k, c in self.cells.items()}
        return out


CONDITIONS = {"quiet": False, "loaded": True}


def _judged(stored, stored_ctl, series, ctl, policy, n: int, runs: int) -> list:
    """The verdicts of ``n`` comparisons of ``runs`` consecutive runs each (cyclically)."""
    out = []
    for i in range(n):
        picks = [(i + j) % len(series) for j in range(runs)]
        out.append(judge(stored, [series[k] for k in picks], policy,
                         controls=(stored_ctl, [ctl[k] for k in picks])))
    return out


def judge_all(values: dict[str, dict[str, list[float]]], *, keep: int, compare_runs: int,
              effects: Sequence[float], policies: Optional[dict] = None,
              ratios: frozenset = frozenset(),
              controls: Optional[dict[str, dict[str, list]]] = None) -> list[Row]:
    """The table rows from ``phase name -> record id -> per-run values`` (Note [Measuring
    the detector]); ``controls`` (same layout): each run's host control (Note [Host
    adjustment]). Conditions whose phases were not measured are left out."""
    from pytest_benchmark.utils import parse_compare_fail

    check = parse_compare_fail(PYTEST_BENCHMARK_RULE)
    controls = controls or {}
    rows = []
    for record_id in sorted(values.get("baseline", {})):
        base = values["baseline"][record_id]
        policy = (policies or {}).get(record_id, Policy())
        stored = base[-keep:]
        base_ctl = (controls.get("baseline", {}).get(record_id) or [None] * len(base))[-keep:]
        found, spread, nb = baseline_mde(stored, base_ctl, compare_runs, policy)
        cells = {}
        for condition, loaded in CONDITIONS.items():
            phases = [Phase(0.0, loaded), *(Phase(e, loaded) for e in effects)]
            series = {p.effect: values.get(p.name, {}).get(record_id, []) for p in phases}
            n = min(len(base), *(len(v) for v in series.values()))
            if n == 0:
                continue
            ctl = {p.effect: controls.get(p.name, {}).get(record_id) or [None] * n
                   for p in phases}
            judged = {e: _judged(stored, base_ctl, series[e], ctl[e], policy, n, compare_runs)
                      for e in series}
            pb = {e: sum(bool(check.fails({"median": series[e][i]}, {"median": base[i]}))
                         for i in range(n)) for e in series}
            cells[condition] = Cell(
                n, sum(v.verdict == "regression" for v in judged[0.0]),
                sum(v.verdict == "suspicious" for v in judged[0.0]),
                {e: sum(v.verdict == "regression" for v in judged[e]) for e in effects},
                sum(v.verdict == "unreliable" for vs in judged.values() for v in vs),
                pb[0.0], {e: pb[e] for e in effects},
                {e: statistics.median(series[e]) / statistics.median(base) for e in series})
        if cells:
            rows.append(Row(record_id, spread, found,
                            detectable_text(found, spread, nb, compare_runs, policy), cells,
                            detectable=record_id not in ratios,
                            runs_for={e: runs_for(spread, nb, e, policy, limit=RUNS_FOR_LIMIT)
                                      for e in effects}))
    return rows


def table(rows: Sequence[Row], *, effects: Sequence[float], compare_runs: int,
          keep: int = 10) -> str:
    """The Markdown table of Note [Measuring the detector] (docs/benchmarks.md keeps one)."""
    pcts = [f"{e:.0%}" for e in effects]
    head = ["benchmark", "condition", "baseline spread", f"MDE ({compare_runs} runs)",
            *(f"runs for {p}" for p in pcts),
            "engine A/A false alarms", *(f"engine {p} detected" for p in pcts), "unreliable",
            "pytest-benchmark A/A", *(f"pytest-benchmark {p}" for p in pcts)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    totals: dict[str, dict] = {}
    for r in rows:
        for condition, c in r.cells.items():
            n = c.comparisons
            slowed = [f"{c.detected[e]}/{n} ({c.ratio[e]:.3f}x)" if r.detectable
                      else "n/a (ratio)" for e in effects]
            pb = [f"{c.pb_detected[e]}/{n}" if r.detectable else "n/a" for e in effects]
            bad = r.unreliable(condition)
            judged = n * (1 + len(effects))
            mde_text = "none" if r.mde is None else f"{r.mde:.1%}"
            if r.mde is None or r.mde > TARGET_EFFECT:
                mde_text += " (too noisy for 15%)"
            needed = ["-" if r.runs_for.get(e) is None else str(r.runs_for[e]) for e in effects]
            lines.append(
                f"| `{r.benchmark}` | {condition} | "
                f"{'-' if r.spread is None else f'{r.spread:.1%}'} | {mde_text} | "
                + " | ".join(needed) + " | "
                f"{c.aa}/{n} ({c.aa_suspicious} suspicious) | " + " | ".join(slowed) +
                f" | {'yes' if bad else f'{c.unreliable}/{judged}'} | {c.pb_aa}/{n} | "
                + " | ".join(pb) + " |")
            t = totals.setdefault(condition, {"aa": 0, "n": 0, "det": {e: 0 for e in effects},
                                              "dn": 0, "pb_aa": 0, "bad": 0, "rows": 0})
            t["rows"] += 1
            if bad:
                t["bad"] += 1
                continue
            t["aa"] += c.aa
            t["n"] += n
            t["pb_aa"] += c.pb_aa
            if r.detectable:
                t["dn"] += n
                for e in effects:
                    t["det"][e] += c.detected[e]
    lines.append("")
    parts = []
    for condition, t in totals.items():
        found = ", ".join(f"{p} {t['det'][e]}/{t['dn']}" for p, e in zip(pcts, effects))
        parts.append(f"{condition}: engine false alarms {t['aa']}/{t['n']}, detected {found} "
                     f"(pytest-benchmark false alarms {t['pb_aa']}/{t['n']}); unreliable "
                     f"{t['bad']} of {t['rows']}")
    lines.append(f"Engine: {compare_runs} runs per compare against the last {keep} baseline "
                 f"runs (the quiet baseline, also for the loaded compares); pytest-benchmark: "
                 f"one run against one run, {PYTEST_BENCHMARK_RULE}. MDE: Note [Minimum "
                 f"detectable effect]; runs for p: the fewest compare runs whose MDE is "
                 f"within p at this baseline ('-': more than {RUNS_FOR_LIMIT}, or never: the "
                 f"margin). Totals over the reliable benchmarks: "
                 + "; ".join(parts) + ".")
    return "\n".join(lines)


def main(*, runs: int, effects: Sequence[float] = EFFECTS, load: bool = False,
         as_json: bool = False, root: Path, device: str = "cpu", select: Optional[str] = None,
         scale: str = "small", compare_runs: int = COMPARE_RUNS, keep: int = 10,
         timeout: float = 600.0, keep_dir: Optional[Path] = None,
         progress: Optional[Callable[[str], None]] = None) -> int:
    """Run the measurement (Note [Measuring the detector]) and print the table."""
    from harness.bench.workloads import WORKLOADS, policy_for

    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    for effect in effects:
        fault_for(effect)  # a usage error before the first run
    phases = phases_of(effects, load)
    with tempfile.TemporaryDirectory(prefix="harness-bench-eval-") as tmp:
        work = keep_dir or Path(tmp)
        values, controls = collect(work, phases, runs, root=root, device=device,
                                   select=select, scale=scale, timeout=timeout, progress=say)
    policies = {record_id: policy_for(record_id) for record_id in values["baseline"]}
    ratios = frozenset(w.id for w in WORKLOADS if w.kind == "ratio")
    rows = judge_all(values, keep=keep, compare_runs=compare_runs, effects=effects,
                     policies=policies, ratios=ratios, controls=controls)
    doc = {"runs": runs, "effects": list(effects), "load": load, "compare_runs": compare_runs,
           "cpu": cpu_name(), "rows": [r.to_json() for r in rows], "values": values,
           "controls": controls}
    if keep_dir is not None:
        (keep_dir / "bench-eval.json").write_text(json.dumps(doc, indent=1))
    if as_json:
        print(json.dumps(doc, indent=1))
    else:
        print(f"CPU: {cpu_name()}; {runs} rounds of {', '.join(p.name for p in phases)}")
        print(table(rows, effects=effects, compare_runs=compare_runs, keep=keep))
    return 0 if rows else 1


def cpu_name() -> str:
    """The host CPU as the results fingerprint names it (model, family, model number)."""
    from harness.device import cpu_identity, cpu_model_name

    ident = cpu_identity()
    extra = ", ".join(f"{k} {v}" for k, v in ident.items() if k != "vendor" and v)
    return cpu_model_name() + (f" ({extra})" if extra else "")


@dataclasses.dataclass(frozen=True)
class Phase:
    """One series of process runs: the baseline, A/A (``effect`` 0) or a slow-down, quiet
    or under the background load (Note [Measuring the detector])."""

    effect: float = 0.0
    loaded: bool = False
    baseline: bool = False

    @property
    def name(self) -> str:
        base = "baseline" if self.baseline else (
            "aa" if not self.effect else f"slow{round(self.effect * 100)}")
        return base + ("-load" if self.loaded else "")

    @property
    def fault(self) -> Optional[str]:
        return fault_for(self.effect) if self.effect else None


def phases_of(effects: Sequence[float], load: bool) -> list[Phase]:
    """The phases of one measurement: the quiet baseline, then A/A and each slow-down,
    quiet, and again under the load when ``load``."""
    out = [Phase(baseline=True)]
    for loaded in (False, True) if load else (False,):
        out += [Phase(0.0, loaded), *(Phase(e, loaded) for e in effects)]
    return out


LOAD_CODE = ("import os, sys, time\n"
             "cpu, limit = int(sys.argv[1]), float(sys.argv[2])\n"
             "if cpu >= 0 and hasattr(os, 'sched_setaffinity'):\n"
             "    os.sched_setaffinity(0, {cpu})\n"
             "end = time.monotonic() + limit\n"
             "while time.monotonic() < end:\n"
             "    pass\n")


def load_cpu() -> int:
    """The CPU the load spins on: the one the benchmarks are pinned to (Note [One CPU per
    timed benchmark]), so it competes with them; -1 where there is no affinity."""
    import os

    from harness.bench.timing import PIN_ENV

    if not hasattr(os, "sched_getaffinity"):
        return -1
    choice = os.environ.get(PIN_ENV, "").strip().lower()
    return int(choice) if choice.isdigit() else min(os.sched_getaffinity(0))


@contextlib.contextmanager
def background_load(seconds: float, cpu: Optional[int] = None) -> Iterator[int]:
    """A bounded background load: one child process spinning on one CPU for at most
    ``seconds`` (it stops by itself then, and dies with this process: Note [SIGTERM is
    an interrupt] in :mod:`harness.stopping`); stopped on leaving, errors and Ctrl-C
    included. Yields the child's pid."""
    cpu = load_cpu() if cpu is None else cpu
    proc = subprocess.Popen([sys.executable, "-c", LOAD_CODE, str(cpu), f"{seconds:.1f}"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            preexec_fn=stopping.child_preexec())
    try:
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def collect(work: Path, phases: Sequence[Phase], runs: int, *, root: Path, device: str,
            select: Optional[str], scale: str, timeout: float,
            progress: Callable[[str], None]) -> tuple[dict, dict]:
    """``runs`` rounds, each one process run per phase in turn (drift hits every phase
    alike); loaded phases run with :func:`background_load`. Kept runs are reused.
    Returns values and controls, ``phase name -> record id -> per-run list``."""
    values: dict[str, dict[str, list]] = {p.name: {} for p in phases}
    controls: dict[str, dict[str, list]] = {p.name: {} for p in phases}
    start = time.monotonic()
    for i in range(runs):
        for phase in phases:
            out = work / phase.name / f"run{i:03d}"
            load = background_load(timeout) if phase.loaded and not _kept(out) \
                else contextlib.nullcontext()
            with load:
                found = one_run(out, root=root, device=device, fault=phase.fault,
                                select=select, scale=scale, timeout=timeout)
            for record_id, (value, control) in found.items():
                values[phase.name].setdefault(record_id, []).append(value)
                controls[phase.name].setdefault(record_id, []).append(control)
        progress(f"[bench-eval] round {i + 1}/{runs} ({', '.join(p.name for p in phases)}): "
                 f"{time.monotonic() - start:.0f} s elapsed")
    return values, controls


def _kept(out: Path) -> bool:
    return out.is_dir() and bool(results_files(out))
