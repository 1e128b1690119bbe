"""``--bench-runs K``: the benchmark selection in K fresh processes, judged together.

Note [K process runs]
~~~~~~~~~~~~~~~~~~~~~
The process that runs the benchmarks (the *parent*) is one of the K runs. Before its
first benchmark (a session fixture of ``suites/bench``) it starts K-1 *children* one
after another (never in parallel: they would time each other), each a plain pytest
process over the same selected benchmark node ids with the same device, seed, scale
and injected faults, ``--baseline off`` and its own temporary ``--results-dir``, and
:data:`CHILD_ENV` set so it does not spawn children of its own. Each child's records
carry one entry in ``info["runs"]``; the parent reads them from the child's results
file and each benchmark test appends its own run, so the test judges (and records)
all K runs. With ``--baseline record`` the K runs are appended to the stored record's
runs (:func:`harness.baselines._merge_runs`, last 10 kept). A child that fails to run
is reported and its runs are missing (the verdict says how many runs it had).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from harness import results as results_mod
from harness import stopping

CHILD_ENV = "HARNESS_BENCH_CHILD"


def is_child() -> bool:
    return bool(os.environ.get(CHILD_ENV))


def child_command(nodeids: Sequence[str], results_dir: Path, *, device: str, seed: int,
                  scale: str, faults: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    """The pytest command line of one child run."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "--run-benchmarks", "--baseline", "off", "--results-dir", str(results_dir),
               "--device", device, "--seed", str(seed), "--training-scale", scale, *extra]
    for fault in faults:
        command += ["--inject-fault", fault]
    return command + list(nodeids)


def read_runs(results_dir: Path) -> dict[str, list[dict]]:
    """record id -> the per-run entries in the results file(s) a child wrote."""
    found: dict[str, list[dict]] = {}
    for path in results_mod.results_files(results_dir):
        try:
            records = results_mod.read_document(path).get("records", {})
        except (results_mod.SchemaError, AttributeError):
            continue
        for record_id, rec in records.items():
            runs = (rec.get("info") or {}).get("runs")
            if isinstance(runs, list):
                found.setdefault(record_id, []).extend(runs)
    return found


def spawn(nodeids: Sequence[str], children: int, *, root: Path, device: str, seed: int,
          scale: str, faults: Sequence[str], timeout: float = 1800.0,
          progress: Optional[Callable[[str], None]] = None) -> tuple[dict[str, list[dict]],
                                                                     list[str]]:
    """Run ``children`` child processes of the benchmark selection (Note [K process runs]).

    Returns the children's runs per record id, and one problem line per failed child.
    """
    say = progress or (lambda _msg: None)
    runs: dict[str, list[dict]] = {}
    problems: list[str] = []
    env = dict(os.environ, **{CHILD_ENV: "1"})
    with tempfile.TemporaryDirectory(prefix="harness-bench-runs-") as tmp:
        for index in range(children):
            out = Path(tmp) / f"run{index + 1}"
            command = child_command(nodeids, out, device=device, seed=seed, scale=scale,
                                    faults=faults)
            start = time.monotonic()
            try:
                proc = subprocess.run(command, cwd=root, env=env, capture_output=True,
                                      text=True, timeout=timeout,
                                      preexec_fn=stopping.child_preexec())
                code, tail = proc.returncode, (proc.stdout + proc.stderr)[-2000:]
            except subprocess.TimeoutExpired:
                code, tail = None, f"killed after {timeout:.0f} s"
            found = read_runs(out)
            for record_id, entries in found.items():
                runs.setdefault(record_id, []).extend(entries)
            seconds = time.monotonic() - start
            say(f"bench run {index + 1}/{children + 1} (child): {len(found)} benchmarks, "
                f"{seconds:.0f} s, exit {code}")
            if code not in (0, 1) or not found:  # 1: a failed check; still has timings
                problems.append(f"bench child run {index + 1} exited {code} with "
                                f"{len(found)} records; output ends:\n{tail}")
    return runs, problems
