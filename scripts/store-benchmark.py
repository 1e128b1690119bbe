#!/usr/bin/env python3
"""The store's benchmark (docs/benchmarks.md): history over 10, 100 and 365 nightly runs of
the default run's size, on SQLite and PostgreSQL, beside today's file-based history.

The runs are one real results file (``python3 -m pytest -m npu --baseline off
--results-dir DIR`` writes it) perturbed night by night, as nightlies of one stack differ:
a deterministic kernel's errors are the same every night, so most metrics repeat; 1% of
the records (every numeric metric) move by N(0, 1%) noise each night; 20 records step up
30% from night 5 on (the change points history must find). Each night is stored with the
store's own ``put``. After 10, 100 and 365 nights it measures ``python -m harness history
--store URL --json`` (wall seconds and peak RSS, /usr/bin/time -v), the store's size on
disk and ``python -m harness store import FILE`` of one more run; with ``--files`` also the
file-based ``python -m harness history DIR`` over 10 perturbed results files.

    python3 scripts/store-benchmark.py RESULTS.json --store sqlite:////tmp/bench.db --out sqlite.json
    python3 scripts/store-benchmark.py RESULTS.json --store postgresql://u:pw@127.0.0.1:5432/bench --out pg.json
    python3 scripts/store-benchmark.py RESULTS.json --files /tmp/files --out files.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NOISY, STEPS, STEP_NIGHT, STEP = 0.01, 20, 5, 1.30


def plan(run, seed: int = 0):
    """Which records are noisy and which step (fixed for every night)."""
    rng = random.Random(seed)
    ids = sorted(rid for rid, rec in run.records.items()
                 if any(isinstance(v, (int, float)) and not isinstance(v, bool) and v
                        for v in rec.metrics.values()))
    noisy = set(rng.sample(ids, max(1, int(NOISY * len(ids)))))
    rest = sorted(set(ids) - noisy)
    steps = set(rng.sample(rest, min(STEPS, len(rest))))
    return noisy, steps


def night(base, originals, noisy, steps, k: int, rng: random.Random):
    """Night ``k``: the base run with its planned records perturbed (in place)."""
    base.started = f"2026-{1 + k // 28:02d}-{1 + k % 28:02d}T23:00:00Z"
    base.finished = base.started
    for rid in noisy | steps:
        rec, metrics = base.records[rid], originals[rid]
        factor = (1 + rng.gauss(0, 0.01)) if rid in noisy else (STEP if k >= STEP_NIGHT else 1)
        rec.metrics = {name: (value * factor if isinstance(value, float) else value)
                       for name, value in metrics.items()}
    return base


def timed(argv: list[str]) -> dict:
    """Wall seconds and peak RSS (MB) of a command (/usr/bin/time -v)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as log:
        start = time.perf_counter()
        done = subprocess.run(["/usr/bin/time", "-v", "-o", log.name, *argv], cwd=ROOT,
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
        text = log.read()
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    return {"seconds": round(wall, 2), "rss_mb": round(rss / 1024, 1), "rc": done.returncode,
            "out": done.stdout}


def size_mb(url: str) -> float:
    from harness.store import open_store

    store = open_store(url)
    with store.engine.connect() as conn:
        if url.startswith("sqlite"):
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            path = Path(url.split(":///", 1)[1])
            total = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
        else:
            total = conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar()
    store.close()
    return round(total / 2**20, 1)


def bench_store(path: str, url: str, counts: list[int]) -> list[dict]:
    from harness import results
    from harness.store import open_store

    base = results.load(path)
    originals = {rid: dict(rec.metrics) for rid, rec in base.records.items()}
    noisy, steps = plan(base)
    rng = random.Random(1)
    store = open_store(url)
    rows, done, put_seconds = [], len(store.runs()), []
    for target in counts:
        while done < target:
            run = night(base, originals, noisy, steps, done, rng)
            start = time.perf_counter()
            store.put(run, run_id=f"night-{done}", source=f"night-{done}.json")
            put_seconds.append(time.perf_counter() - start)
            done += 1
        history = timed([sys.executable, "-m", "harness", "history", "--store", url, "--json"])
        changes = len(json.loads(history.pop("out") or "{}").get("changes", [])) \
            if history["rc"] == 0 else None
        imported = timed([sys.executable, "-m", "harness", "store", "import", path, "--store",
                          url, "--as-baseline", "--run-id", f"import-{target}", "-q"])
        imported.pop("out")
        median = sorted(put_seconds)[len(put_seconds) // 2] if put_seconds else None
        rows.append({"runs": target, "history": history, "changes": changes,
                     "store_mb": size_mb(url), "put_seconds_median": median and round(median, 2),
                     "cli_import": imported})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def bench_files(path: str, folder: Path, count: int) -> dict:
    from harness import results

    base = results.load(path)
    originals = {rid: dict(rec.metrics) for rid, rec in base.records.items()}
    noisy, steps = plan(base)
    rng = random.Random(1)
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(count):
        run = night(base, originals, noisy, steps, k, rng)
        results.write(copy.copy(run), folder / f"202601{k + 1:02d}T230000Z-cpu.json")
    history = timed([sys.executable, "-m", "harness", "history", str(folder), "--json"])
    changes = len(json.loads(history.pop("out") or "{}").get("changes", [])) \
        if history["rc"] == 0 else None
    row = {"runs": count, "history": history, "changes": changes,
           "files_mb": round(sum(p.stat().st_size for p in folder.glob("*.json")) / 2**20, 1)}
    print(json.dumps(row), flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="A default run's results file")
    parser.add_argument("--store", help="Store URL to fill and measure")
    parser.add_argument("--runs", default="10,100,365", help="Nights measured at")
    parser.add_argument("--files", help="Folder for the file-based history of 10 runs")
    parser.add_argument("--out", required=True, help="Write the rows here (JSON)")
    args = parser.parse_args()
    out = {"load": os.getloadavg(), "cpus": os.cpu_count()}
    if args.store:
        out["store"] = bench_store(args.results, args.store,
                                   [int(n) for n in args.runs.split(",")])
    if args.files:
        out["files"] = bench_files(args.results, Path(args.files), 10)
    out["load_after"] = os.getloadavg()
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
