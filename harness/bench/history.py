"""Nightly history: change points per benchmark and per numeric metric over stored runs.

Note [Change points]
~~~~~~~~~~~~~~~~~~~~
Series: the honest results files (not fault-injected, complete: Note [Honest
comparisons] in :mod:`harness.verdict`; the ones left out are counted in the header) of
one device (``device_type``/``device_slug``) and one stack kind (``torch-``, ``cann-``...), in time order (``started``); a benchmark's value
per run is the median of that results file's process runs (``info["runs"]``), any other
record contributes each numeric metric. Detection uses ruptures (PELT, the exact
penalised segmentation; the ``l2`` cost on the series standardised by a noise estimate
that level shifts do not inflate: 1.4826 x MAD of successive differences / sqrt(2)) with
penalty ``PENALTY x log(n)``. The search is ruptures' ``KernelCPD(kernel="linear")``:
the linear kernel's cost is the ``l2`` cost, and its PELT is ruptures' C implementation
(``ekcpd_pelt_L2``), where ``Pelt(model="l2")`` evaluates each candidate segment in
Python (O(n^2) calls a series: 0.3 s at 365 nights); the cuts are the same
(tests/test_bench.py compares the two on random series with and without steps). Each
candidate is then kept only when the two segments it separates differ significantly
(Mann-Whitney U, two-sided, p < ``alpha``) and by at least ``min_effect`` (relative,
default 5%), so a noisy but flat series reports nothing; while
one fails, the weakest failing cut is dropped (its two segments merged) and the rest are
tested again, so a spurious extra cut next to a real change (segments of 2 and 3 runs,
too few for the test) does not take the real one with it. A
change is named by the first run after it: its file, time and stack.

A benchmark series whose every run carries a host control is judged host-adjusted, as
the verdict is (Note [Host adjustment] in :mod:`harness.bench.stats`): change points of
the raw series cut it into segments, the within-segment Theil-Sen slope of log value on
log control (:func:`harness.bench.stats.host_slope`, each segment centred on its own
medians, so the changes do not enter the slope) adjusts every value to the series'
median control, and the change points are found again on the adjusted series.

Why ruptures and not Apache Otava or MongoDB's signal-processing-algorithms (the
E-divisive implementations the issue names): on this stack both would change the
environment a conformance run measures. apache-otava 0.8 pins ``numpy==2.2.0`` and
``scipy<1.17`` and pulls google-cloud-bigquery, pg8000 and slack-sdk;
signal-processing-algorithms 2.1.6 needs ``numpy<2`` and Python 3.11 exactly (and
gevent). ruptures 1.1.10 is maintained, needs only numpy and scipy, and installs with no
change to either.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path
from typing import Optional, Sequence, Union

PENALTY = 3.0
MIN_SIZE = 2
DEFAULT_ALPHA = 0.05
DEFAULT_MIN_EFFECT = 0.05
INSTALL_HINT = ("change-point detection needs ruptures: pip install 'npu-conformance[bench]' "
                "(or pip install ruptures)")


class MissingDependency(RuntimeError):
    """An optional library is not installed; the message says how to install it."""


@dataclasses.dataclass
class ChangePoint:
    """A change point: ``index`` is the first run after the change."""

    index: int
    before: float
    after: float
    p_value: float

    @property
    def ratio(self) -> float:
        return self.after / self.before if self.before else math.inf


@dataclasses.dataclass
class Run:
    """One stored results file, as history sees it."""

    path: str
    started: str
    stack_id: str
    device: str
    values: dict[str, float]  # series name -> value
    controls: dict[str, float] = dataclasses.field(default_factory=dict)  # -> host control


def _ruptures():
    try:
        import ruptures
    except ImportError as exc:
        raise MissingDependency(INSTALL_HINT) from exc
    return ruptures


def noise_scale(values: Sequence[float]) -> float:
    """Noise of a series that level shifts do not inflate (MAD of successive differences)."""
    import numpy as np

    diffs = np.diff(np.asarray(values, dtype=np.float64))
    if not len(diffs):
        return 0.0
    centre = np.median(diffs)
    return float(1.4826 * np.median(np.abs(diffs - centre)) / math.sqrt(2))


def segment(z, *, min_size: int, pen: float) -> list[int]:
    """The ends of the optimal segments of ``z`` (a 1-d array) under the ``l2`` cost and
    penalty ``pen``, the last being ``len(z)`` (Note [Change points]: ruptures' C PELT of
    the linear kernel)."""
    algo = _ruptures().KernelCPD(kernel="linear", min_size=min_size, jump=1)
    return [int(c) for c in algo.fit(z.reshape(-1, 1)).predict(pen=pen)]


def change_points(values: Sequence[float], *, alpha: float = DEFAULT_ALPHA,
                  min_effect: float = DEFAULT_MIN_EFFECT,
                  min_size: int = MIN_SIZE) -> list[ChangePoint]:
    """Significant level changes of one series (Note [Change points])."""
    import numpy as np
    from scipy.stats import mannwhitneyu

    n = len(values)
    if n < 2 * min_size:
        return []
    raw = np.asarray(values, dtype=np.float64)
    positive = bool((raw > 0).all())
    series = np.log(raw) if positive else raw
    level = float(np.median(series))
    floor = 1e-3 if positive else 1e-3 * max(abs(level), 1e-12)
    scale = max(noise_scale(series), floor)
    z = (series - level) / scale
    if float(np.ptp(z)) == 0.0:
        return []
    cuts = [0, *segment(z, min_size=min_size, pen=PENALTY * math.log(n))]
    while True:  # drop the weakest failing cut, merging its segments, and test again
        found, failing = [], []
        for k in range(1, len(cuts) - 1):
            left, right = list(values[cuts[k - 1]:cuts[k]]), list(values[cuts[k]:cuts[k + 1]])
            before, after = statistics.median(left), statistics.median(right)
            effect = abs(after - before) / abs(before) if before else math.inf
            p_value = float(mannwhitneyu(left, right, alternative="two-sided").pvalue)
            if p_value < alpha and effect >= min_effect:
                found.append(ChangePoint(cuts[k], before, after, p_value))
            else:
                failing.append((p_value, -effect, k))
        if not failing:
            return found
        cuts.pop(max(failing)[2])


def host_adjusted(values: Sequence[float], controls: Sequence[float],
                  cuts: Sequence[int]) -> list[float]:
    """``values`` adjusted to the median of ``controls`` (Note [Change points]), the slope
    taken within the segments that ``cuts`` (first indices after a change) separate."""
    from harness.bench.stats import host_slope

    logs, log_ctl = [math.log(v) for v in values], [math.log(c) for c in controls]
    bounds = [0, *cuts, len(values)]
    slope = host_slope([(logs[a:b], log_ctl[a:b]) for a, b in zip(bounds, bounds[1:])])
    centre = statistics.median(log_ctl)
    return [math.exp(v - slope * (c - centre)) for v, c in zip(logs, log_ctl)]


def load_runs(results_dir: Union[str, Path], stack: Optional[str] = None,
              metrics: bool = True) -> tuple[list[Run], str]:
    """The stored runs of one device and stack kind, oldest first, and what was chosen.

    Default: the device and stack kind of the newest results file; ``stack`` restricts
    to one stack id.
    """
    from harness.results import SchemaError, load, results_files
    from harness.stack import split_stack_id
    from harness.store.series import METRIC, series_of
    from harness.verdict import honest

    runs: list[Run] = []
    skipped: list[str] = []
    left_out: dict[str, int] = {}
    for path in results_files(results_dir):
        try:
            result = load(path)
        except SchemaError as exc:  # one bad file must not hide the others
            skipped.append(str(exc))
            continue
        if not honest(result)[0]:  # Note [Honest comparisons] in harness.verdict
            why = "fault-injected" if result.faults else "incomplete"
            left_out[why] = left_out.get(why, 0) + 1
            continue
        fp = result.fingerprint
        values: dict[str, float] = {}
        controls: dict[str, float] = {}
        for kind, name, value, control in series_of(result.records):
            if kind == METRIC and not metrics:
                continue
            values[name] = value
            if control is not None:
                controls[name] = control
        runs.append(Run(str(path), result.started or path.stem, fp.get("stack_id", "?"),
                        f"{fp.get('device_type')}/{fp.get('device_slug')}", values, controls))
    unread = (f" ({len(skipped)} unreadable file(s) skipped; the first: {skipped[0]})"
              if skipped else "")
    unread += ("; left out " + ", ".join(f"{n} {why} run(s)" for why, n in
                                         sorted(left_out.items()))) if left_out else ""
    if not runs:
        return [], f"no results files in {results_dir}{unread}"
    runs.sort(key=lambda r: r.started)
    newest = runs[-1]
    kind = split_stack_id(newest.stack_id)[0]
    chosen = [r for r in runs if r.device == newest.device
              and split_stack_id(r.stack_id)[0] == kind and (stack is None or r.stack_id == stack)]
    what = (f"{len(chosen)} runs of {newest.device}, stack "
            f"{stack or kind + '*'}, {chosen[0].started} .. {chosen[-1].started}"
            if chosen else f"no runs of stack {stack} for {newest.device}") + unread
    return chosen, what


def analyse(runs: Sequence[Run], **kwargs) -> list[dict]:
    """Every change point of every series, as rows (series, first run after it, values)."""
    names = sorted({name for run in runs for name in run.values})
    rows = []
    for name in names:
        points = [i for i, run in enumerate(runs) if name in run.values]
        rows += series_rows(name, points, [runs[i].values[name] for i in points],
                            [runs[i].controls.get(name) for i in points], runs, **kwargs)
    return rows


def series_rows(name: str, points: Sequence[int], series: Sequence[float],
                controls: Sequence[Optional[float]], runs: Sequence, **kwargs) -> list[dict]:
    """The change points of one series: its values at ``runs[points[k]]`` (each with
    ``path``, ``started``, ``stack_id``), host-adjusted where every value has a control."""
    if len(points) < 2 * MIN_SIZE:
        return []
    changes = change_points(series, **kwargs)
    adjusted = all(c is not None for c in controls)
    if adjusted:  # Note [Change points]: judged as the verdict judges, host-adjusted
        series = host_adjusted(series, controls, [c.index for c in changes])
        changes = change_points(series, **kwargs)
    rows = []
    for change in changes:
        index = points[change.index]
        first = runs[index]
        rows.append({"series": name, "run_index": index + 1, "run": Path(first.path).name,
                     "started": first.started, "stack_id": first.stack_id,
                     "before": change.before, "after": change.after,
                     "ratio": change.ratio, "p_value": change.p_value,
                     "host_adjusted": adjusted})
    return rows


def report(rows: list[dict], what: str) -> str:
    lines = [f"history: {what}"]
    if not rows:
        lines.append("no change points")
    for row in rows:
        lines.append(f"{row['series']}: change at run {row['run_index']} ({row['run']}, "
                     f"{row['started']}, stack {row['stack_id']}): {row['before']:.4g} -> "
                     f"{row['after']:.4g} ({row['ratio'] - 1:+.1%}"
                     f"{', host-adjusted' if row.get('host_adjusted') else ''}, Mann-Whitney p="
                     f"{row['p_value']:.2g})")
    return "\n".join(lines)


def main(results_dir: Union[str, Path], *, stack: Optional[str] = None, as_json: bool = False,
         metrics: bool = True, min_effect: float = DEFAULT_MIN_EFFECT) -> int:
    """``python -m harness history``: print the change points; exit 0 (1: nothing to read)."""
    if not Path(results_dir).is_dir():
        print(f"error: {results_dir} is not a folder of results files; give the folder a "
              "run's --results-dir wrote")
        return 2
    runs, what = load_runs(results_dir, stack, metrics=metrics)
    if not runs:
        print(json.dumps({"what": what, "changes": []}, indent=1) if as_json
              else f"history: {what}")
        return 1
    try:
        rows = analyse(runs, min_effect=min_effect)
    except MissingDependency as exc:
        print(f"error: {exc}")
        return 2
    print(json.dumps({"what": what, "changes": rows}, indent=1) if as_json
          else report(rows, what))
    return 0


# Note [History from the store]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The store keeps each run's series values packed (Note [What the store keeps] in
# harness/store/schema.py), so history reads numbers, never JSON, one run at a time. A year
# of a default run is ~200,000 series x 365 runs; most are constant (a deterministic
# kernel's error is the same every night), and a series can only have a change of at least
# ``min_effect`` when (max - min) >= min_effect x min |value|: the medians either side of a
# change lie within [min, max] and the one before is at least min |value| away from zero.
# So one pass over the runs keeps, per series, its first value, and starts keeping a
# series' values from the first run where it differs from that value (every benchmark from
# its first run: host adjustment can move it). A series that never differed is constant
# and cannot change; one that did is rebuilt whole at the end (before it first differed,
# it had its first value in every run whose layout holds it). Only the kept series are
# tested against the bound and segmented: the same rows as reading every file (a test
# proves it), reading and decompressing each run once, and never holding the year in
# memory. Host controls are decompressed only for runs whose layout has a benchmark.
#
# A stored run holds only where it differs from its layout's reference (the layout's first
# stored run), so after the first run of a layout the pass looks only at those positions
# and at the layout's pending ones (where the reference itself differs from a series'
# first value, until that series is kept): per night, work in the values that moved, not
# in the ~217,000 series.


@dataclasses.dataclass
class StoredPoint:
    """A stored run as a change row names it."""

    path: str
    started: str
    stack_id: str


def store_runs(store, *, stack: Optional[str] = None, device: Optional[str] = None):
    """``(chosen stored runs, oldest first; what was chosen)``: the honest runs of one
    device (``TYPE/SLUG``; default: the newest run's) and the newest run's stack kind
    (``stack``: only that stack id); faulted and incomplete runs left out and counted."""
    from harness.stack import split_stack_id

    rows = store.runs()
    left_out: dict[str, int] = {}
    honest = []
    for row in rows:
        if row.honest:
            honest.append(row)
        else:
            why = "fault-injected" if row.faulted else "incomplete"
            left_out[why] = left_out.get(why, 0) + 1
    note = ("; left out " + ", ".join(f"{n} {why} run(s)" for why, n in
                                      sorted(left_out.items()))) if left_out else ""
    if device is not None:
        honest = [r for r in honest if f"{r.device_type}/{r.device_slug}" == device]
    if not honest:
        return [], f"no runs{' of ' + device if device else ''} in the store{note}"
    newest = honest[-1]
    kind = split_stack_id(newest.stack_id)[0]
    name = f"{newest.device_type}/{newest.device_slug}"
    chosen = [r for r in honest if f"{r.device_type}/{r.device_slug}" == name
              and split_stack_id(r.stack_id)[0] == kind and (stack is None or r.stack_id == stack)]
    what = (f"{len(chosen)} runs of {name}, stack {stack or kind + '*'}, "
            f"{chosen[0].started} .. {chosen[-1].started}" if chosen else
            f"no runs of stack {stack} for {name}") + note
    return chosen, what


def analyse_store(store, chosen: Sequence, *, metrics: bool = True, **kwargs) -> list[dict]:
    """:func:`analyse` over stored runs, in one pass (Note [History from the store])."""
    import numpy as np

    min_effect = kwargs.get("min_effect", DEFAULT_MIN_EFFECT)
    pks = [row.pk for row in chosen]
    column: dict[int, int] = {}  # series name id -> column
    mapped: dict[str, np.ndarray] = {}  # layout -> the columns of its ids
    pending: dict[str, np.ndarray] = {}  # layout -> positions whose reference moved, not kept
    tracked_at: dict[str, tuple[int, np.ndarray]] = {}  # layout -> (moves seen, kept positions)
    layout_of: list[Optional[str]] = [None] * len(pks)
    first = np.zeros(0)  # each column's first value (NaN: not seen yet)
    since = np.zeros(0, dtype=np.int64)  # the run its values are kept from (-1: constant)
    bench = np.zeros(0, dtype=bool)
    moves = 0  # columns kept so far: a kept-positions cache is fresh while this is unchanged
    kept: list[tuple[int, np.ndarray, np.ndarray, Optional[np.ndarray]]] = []
    for row in store.scan_series(pks, controls="benchmarks"):
        index, layout = row.index, row.layout
        layout_of[index] = layout
        vals = row.values()
        cols = mapped.get(layout)
        if cols is None:  # the layout's first run: every position
            new = [int(i) for i in row.ids if int(i) not in column]
            for ident in new:
                column[ident] = len(column)
            first = np.concatenate([first, np.full(len(new), np.nan)])
            since = np.concatenate([since, np.full(len(new), -1, dtype=np.int64)])
            bench = np.concatenate([bench, np.zeros(len(new), dtype=bool)])
            cols = mapped[layout] = np.fromiter((column[int(i)] for i in row.ids), np.int64,
                                                len(row.ids))
            bench[cols] |= row.kinds == ord("b")
            seen = first[cols]
            unseen = np.isnan(seen)
            if unseen.any():
                first[cols[unseen]] = vals[unseen]
                seen = first[cols]
            start = np.flatnonzero(((vals != seen) | (bench[cols] & unseen)) & (since[cols] < 0))
        else:  # only where this run or the reference differs from a first value
            look = np.union1d(pending[layout], row.pos)
            start = look[(vals[look] != first[cols[look]]) & (since[cols[look]] < 0)]
        if len(start):
            since[cols[start]] = index
            moves += len(start)
        if layout not in pending:
            pending[layout] = np.flatnonzero((row.ref_vals != first[cols]) & (since[cols] < 0))
        elif len(start):
            pending[layout] = pending[layout][since[cols[pending[layout]]] < 0]
        seen_moves, where = tracked_at.get(layout, (-1, None))
        if seen_moves != moves:
            where = np.flatnonzero(since[cols] >= 0)
            tracked_at[layout] = (moves, where)
        ctl = row.all_controls()
        kept.append((index, cols[where], vals[where], None if ctl is None else ctl[where]))
    tracked = np.flatnonzero(since >= 0)
    slot = np.full(len(column), -1, dtype=np.int64)
    slot[tracked] = np.arange(len(tracked))
    values = np.full((len(pks), len(tracked)), np.nan)
    controls = np.full((len(pks), len(tracked)), np.nan)
    held: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for index, layout in enumerate(layout_of):  # before a series moved: its first value
        if layout is None:
            continue
        if layout not in held:  # the kept series this layout holds, from when, valued
            here = slot[mapped[layout]]
            here = here[here >= 0]
            held[layout] = (here, since[tracked[here]], first[tracked[here]])
        here, kept_since, value = held[layout]
        early = kept_since > index
        values[index, here[early]] = value[early]
    for index, cols, vals, ctl in kept:
        values[index, slot[cols]] = vals
        if ctl is not None:
            controls[index, slot[cols]] = ctl
    count = (~np.isnan(values)).sum(axis=0)
    with np.errstate(invalid="ignore"):
        low, high = np.nanmin(values, axis=0), np.nanmax(values, axis=0)
        small = np.nanmin(np.abs(values), axis=0)
    enough = count >= 2 * MIN_SIZE
    can_change = (high > low) & (high - low >= min_effect * small)
    chosen_cols = np.flatnonzero(enough & (bench[tracked] | (can_change if metrics else False)))
    ids_of = {j: i for i, j in column.items()}
    names = store.names_of(ids_of[int(tracked[k])] for k in chosen_cols)
    points_of = [StoredPoint(row.source or f"store run {row.pk}", row.started, row.stack_id)
                 for row in chosen]
    rows = []
    for k in sorted(chosen_cols.tolist(), key=lambda k: names[ids_of[int(tracked[k])]]):
        present = np.flatnonzero(~np.isnan(values[:, k]))
        ctl = controls[present, k]
        rows += series_rows(names[ids_of[int(tracked[k])]], present.tolist(),
                            values[present, k].tolist(),
                            [None if c != c else c for c in ctl.tolist()], points_of,  # NaN
                            **kwargs)
    return rows


def store_main(url: str, *, stack: Optional[str] = None, device: Optional[str] = None,
               as_json: bool = False, metrics: bool = True,
               min_effect: float = DEFAULT_MIN_EFFECT) -> int:
    """``python -m harness history --store URL``: the change points of the stored runs."""
    from harness.store import StoreError, open_store

    try:
        store = open_store(url)
        chosen, what = store_runs(store, stack=stack, device=device)
        rows = analyse_store(store, chosen, metrics=metrics, min_effect=min_effect) \
            if chosen else []
    except StoreError as exc:
        print(f"error: {exc}")
        return 2
    except MissingDependency as exc:
        print(f"error: {exc}")
        return 2
    print(json.dumps({"what": what, "changes": rows}, indent=1) if as_json
          else report(rows, what) if chosen else f"history: {what}")
    return 0 if chosen else 1
