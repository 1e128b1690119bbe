"""What a run contributes to history: one value per series (Note [Change points] in
:mod:`harness.bench.history`). One definition, read by the file-based history and written
by the store, so both see the same series."""

from __future__ import annotations

import math
import statistics
from typing import Optional

BENCH, METRIC = "b", "m"
"""Series kinds: a benchmark's median per run; a numeric metric of any other record."""
HISTORY_STATUSES = ("pass", "fail", "slower")
"""Statuses whose metrics are measurements (an error or skip has none worth a trend)."""


def bench_value(info: dict) -> tuple[Optional[float], Optional[float]]:
    """A benchmark record's value in one run (the median of its process runs) and its
    host control (likewise; None unless every run has one)."""
    from harness.bench.timing import run_controls, run_values

    runs = info.get("runs") if isinstance(info, dict) else None
    values, controls = run_values(runs), run_controls(runs)
    if not values:
        return None, None
    return (statistics.median(values),
            statistics.median(controls) if None not in controls else None)


def series_of(records: dict) -> list[tuple[str, str, float, Optional[float]]]:
    """``(kind, name, value, control)`` for every series of one run's records (a
    ``{record id: Record}`` mapping): a benchmark is named by its record id, a metric by
    ``<record id>:<metric>``."""
    out = []
    for record_id, rec in records.items():
        bench, control = bench_value(rec.info) if "runs" in rec.info else (None, None)
        if bench is not None:
            out.append((BENCH, record_id, bench, control))
            continue
        if rec.status not in HISTORY_STATUSES:
            continue
        # int or float, never bool; finite: x - x is 0 (NaN for inf); one comprehension
        # per record (a run has ~250,000 metrics)
        out += [(METRIC, f"{record_id}:{name}", float(value), None)
                for name, value in rec.metrics.items()
                if (type(value) is float and value - value == 0.0) or type(value) is int or (
                    type(value) is not bool and isinstance(value, (int, float))
                    and math.isfinite(value))]
    return out
