#!/usr/bin/env python3
"""Where the default run's time goes: a measurement, not a test (docs/benchmarks.md).

Runs, one after the other in fresh processes on this machine (keep it otherwise idle):

1. the default run, ``python -m pytest -m npu`` (what ./run-suite runs on an installed
   checkout), timed from the command to its exit, with the per-test durations the run
   stores for its shard plan summed per suite folder (read from its own store, so the
   timed command is the user's, with no report option added), the collection alone (``--collect-only``), the
   interpreter's start with torch and the plugin imported, and the peak RSS; then the
   next run into the same results folder (its store already holds the first run's
   layout, as for every run after a user's first);
2. the run's end again, in this process on the run's own records: its results file
   written (encoded, gzip) and the run put into a fresh SQLite store, opened apart (what
   the session does before the verdict line; best of 3);
3. the op catalog (``suites/ops/test_catalog.py``) under cProfile: the share of the
   self time spent in the harness's own Python (functions in harness/), by area of the
   harness and with the top functions, and the share were an area free (what the 10% of
   docs/benchmarks.md needs).

Usage: python scripts/default_run_speed.py [--skip-profile] [--json OUT]
Prints a Markdown table. Takes about 3 to 5 minutes on 2 idle cores.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly"]


def _timed(argv: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env)
    return time.perf_counter() - start, proc


def _timed_to_verdict(argv: list[str]) -> tuple[Optional[float], float, int, str]:
    """``(seconds to the VERDICT line, seconds to exit, exit code, stdout)``: the issue's
    clock stops at the verdict line; what follows it (the rest of the summary, the
    interpreter freeing the run's objects) is timed apart."""
    start = time.perf_counter()
    to_verdict = None
    lines = []
    with subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True) as proc:
        for line in proc.stdout:
            if to_verdict is None and line.startswith("VERDICT"):
                to_verdict = time.perf_counter() - start
            lines.append(line)
        rc = proc.wait()
    return to_verdict, time.perf_counter() - start, rc, "".join(lines)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux


def default_run(tmp: Path) -> dict:
    out: dict = {}
    out["startup_s"], _ = _timed([sys.executable, "-c", "import torch, harness.plugin"])
    out["collect_s"], proc = _timed([*PYTEST, "-m", "npu", "--co", "-q"])
    out["to_verdict_s"], out["run_s"], out["rc"], stdout = _timed_to_verdict(
        [*PYTEST, "-m", "npu", f"--results-dir={tmp / 'results'}"])
    durations = _stored_durations(tmp / "results")
    out["verdict"] = next((line for line in stdout.splitlines()
                           if line.startswith("VERDICT")), "")
    out["summary"] = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    # the next run into the same results folder: the store now holds the first run's
    # layout, so the run's end writes only its differences (what every run after a
    # user's first one meets)
    out["next_to_verdict_s"], out["next_run_s"], out["next_rc"], _ = _timed_to_verdict(
        [*PYTEST, "-m", "npu", f"--results-dir={tmp / 'results'}"])
    out["peak_rss_mb"] = _peak_rss_mb()
    per: collections.Counter = collections.Counter()
    for test, seconds in durations.items():
        parts = test.split("/")
        family = parts[1] if len(parts) > 2 and parts[0] == "suites" else parts[0]
        per[family] += seconds
    out["tests_s_by_family"] = dict(per.most_common())
    files = sorted((tmp / "results").glob("*.json*"))
    if files:
        out["results_bytes"] = files[-1].stat().st_size
        from harness import results

        start = time.perf_counter()
        results.load(files[-1])
        out["results_load_s"] = time.perf_counter() - start
        out.update(_write_again(results.load(files[-1]), tmp))
        start = time.perf_counter()
        report = tmp / "report.md"
        subprocess.run([sys.executable, "-m", "harness", "report", str(files[-1]), "--md",
                        str(report)], cwd=ROOT, capture_output=True, text=True)
        out["harness_report_s"] = time.perf_counter() - start
    return out


def _stored_durations(results_dir: Path) -> dict[str, float]:
    """Each test's seconds (setup, call and teardown) as the run stored them in its
    results folder's store, for its shard plan."""
    from harness.store import open_store

    store = open_store(f"sqlite:///{results_dir / 'harness.db'}")
    try:
        return store.durations()
    finally:
        store.close()


def _write_again(run, tmp: Path) -> dict:
    """Seconds (best of 3) to write ``run``'s results file and to store it in a fresh
    SQLite store, as the session does at the run's end (a first run: a new layout)."""
    from harness import results
    from harness.store import open_store

    best = {"write_file_s": math.inf, "write_store_s": math.inf}
    for k in range(3):
        start = time.perf_counter()
        encoded = results.encode(run)
        path = results.write(run, tmp / f"again-{k}{results.RESULTS_SUFFIX}", encoded=encoded)
        filed = time.perf_counter()
        store = open_store(f"sqlite:///{tmp / f'again-{k}.db'}")
        try:
            opened = time.perf_counter()
            store.put(run, run_id=f"again-{k}", source=str(path), encoded=encoded)
            stored = time.perf_counter()
        finally:
            store.close()
        best["write_file_s"] = min(best["write_file_s"], filed - start)
        best["write_store_s"] = min(best["write_store_s"], stored - opened)
    return best


AREAS = (("judgement", ("harness/compare.py", "harness/ops/outcome.py",
                        "harness/ops/policy.py:judge", "harness/ops/runner.py:_judge_all")),
         ("executor", ("harness/ops/runner.py", "harness/ops/policy.py", "harness/fallback.py",
                       "harness/device.py", "harness/faults/")),
         ("inputs", ("harness/ops/",)),
         ("results and store", ("harness/store/", "harness/results.py", "harness/session.py")),
         ("the rest", ("harness/",)))
"""Areas of the harness, by file (or ``file:function``), the first that matches."""


def _area(where: str, name: str) -> str:
    return next(area for area, prefixes in AREAS
                if any(f"{where}:{name}" == p or (":" not in p and where.startswith(p))
                       for p in prefixes))


def profile_catalog(tmp: Path) -> dict:
    prof = tmp / "catalog.prof"
    _, proc = _timed([sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "pytest",
                      "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
                      "suites/ops/test_catalog.py", "--baseline", "off",
                      f"--results-dir={tmp / 'prof-results'}"])
    stats = pstats.Stats(str(prof))
    harness = str(ROOT / "harness")
    total = own = 0.0
    rows = []
    areas: collections.Counter = collections.Counter()
    for (path, line, name), (_, calls, tottime, _, _) in stats.stats.items():
        total += tottime
        if os.path.realpath(path).startswith(harness):
            own += tottime
            where = os.path.relpath(os.path.realpath(path), ROOT)
            areas[_area(where, name)] += tottime
            rows.append((tottime, f"{where}:{line} {name}", calls))
    rows.sort(reverse=True)
    return {"self_s": total, "harness_self_s": own, "harness_share": own / total,
            "areas": {area: {"s": s, "share_were_it_free": (own - s) / (total - s)}
                      for area, s in areas.most_common()},
            "rc": proc.returncode, "top": [{"s": s, "where": w, "calls": c}
                                           for s, w, c in rows[:8]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-profile", action="store_true", help="Only the default run")
    parser.add_argument("--json", metavar="OUT", help="Also write the figures as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="default-run-speed-") as tmp:
        figures = {"cpu": _cpu(), "default_run": default_run(Path(tmp))}
        if not args.skip_profile:
            figures["catalog_profile"] = profile_catalog(Path(tmp))
    run = figures["default_run"]
    print(f"CPU: {figures['cpu']}\n")
    print("| what | value |\n| --- | --- |")
    verdict_s = run["to_verdict_s"]
    print(f"| default run, command to the verdict line | "
          f"{'no verdict line' if verdict_s is None else f'{verdict_s:.1f} s'} |")
    print(f"| default run, command to exit | {run['run_s']:.1f} s (exit {run['rc']}) |")
    next_s = run["next_to_verdict_s"]
    print(f"| the next run into the same results folder and store, to the verdict line | "
          f"{'no verdict line' if next_s is None else f'{next_s:.1f} s'} "
          f"({run['next_run_s']:.1f} s to exit {run['next_rc']}) |")
    print(f"| its verdict line | {run['verdict'].strip()} |")
    print(f"| its last line | {run['summary']} |")
    print(f"| interpreter + torch + plugin import | {run['startup_s']:.1f} s |")
    print(f"| collection alone (`--co`) | {run['collect_s']:.1f} s |")
    for family, seconds in run["tests_s_by_family"].items():
        print(f"| tests in suites/{family} (pytest durations) | {seconds:.1f} s |")
    print(f"| peak RSS of a child | {run['peak_rss_mb']:.0f} MB |")
    if "results_bytes" in run:
        print(f"| results file | {run['results_bytes'] / 2**20:.2f} MB |")
        print(f"| results.load of it | {run['results_load_s']:.2f} s |")
        print(f"| the run's end again: results file written (best of 3) | "
              f"{run['write_file_s']:.2f} s |")
        print(f"| the run's end again: `Store.put` into a fresh SQLite store, opened apart "
              f"(best of 3) | "
              f"{run['write_store_s']:.2f} s |")
        print(f"| `harness report` of it (process) | {run['harness_report_s']:.1f} s |")
    prof = figures.get("catalog_profile")
    if prof:
        print(f"| op catalog self time under cProfile | {prof['self_s']:.1f} s |")
        print(f"| of it in harness/ | {prof['harness_self_s']:.1f} s "
              f"({100 * prof['harness_share']:.1f}%) |")
        for area, row in prof["areas"].items():
            print(f"|   area: {area} | {row['s']:.2f} s (the share were it free: "
                  f"{100 * row['share_were_it_free']:.1f}%) |")
        for row in prof["top"]:
            print(f"|   {row['where']} | {row['s']:.2f} s, {row['calls']} calls |")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


def _cpu() -> str:
    """The CPU as bench-eval names it (model name, family, model number), and its cores."""
    sys.path.insert(0, str(ROOT))
    from harness.bench.evaluate import cpu_name

    return f"{cpu_name()}, {os.cpu_count()} cores"


if __name__ == "__main__":
    sys.exit(main())
