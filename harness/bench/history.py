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
penalty ``PENALTY x log(n)``. Each candidate is then kept only when the two segments it
separates differ significantly (Mann-Whitney U, two-sided, p < ``alpha``) and by at least
``min_effect`` (relative, default 5%), so a noisy but flat series reports nothing; while
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
    diffs = [b - a for a, b in zip(values, values[1:])]
    if not diffs:
        return 0.0
    centre = statistics.median(diffs)
    return 1.4826 * statistics.median(abs(d - centre) for d in diffs) / math.sqrt(2)


def change_points(values: Sequence[float], *, alpha: float = DEFAULT_ALPHA,
                  min_effect: float = DEFAULT_MIN_EFFECT,
                  min_size: int = MIN_SIZE) -> list[ChangePoint]:
    """Significant level changes of one series (Note [Change points])."""
    import numpy as np
    from scipy.stats import mannwhitneyu

    n = len(values)
    if n < 2 * min_size:
        return []
    positive = all(v > 0 for v in values)
    series = [math.log(v) for v in values] if positive else [float(v) for v in values]
    level = statistics.median(series)
    floor = 1e-3 if positive else 1e-3 * max(abs(level), 1e-12)
    scale = max(noise_scale(series), floor)
    z = (np.asarray(series) - level) / scale
    if float(np.ptp(z)) == 0.0:
        return []
    algo = _ruptures().Pelt(model="l2", min_size=min_size, jump=1).fit(z.reshape(-1, 1))
    cuts = [0, *algo.predict(pen=PENALTY * math.log(n))]
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


def _run_value(info: dict) -> tuple[Optional[float], Optional[float]]:
    """A benchmark record's value in one results file (the median of its process runs)
    and its host control (likewise; None unless every run has one)."""
    from harness.bench.timing import run_controls, run_values

    runs = info.get("runs") if isinstance(info, dict) else None
    values, controls = run_values(runs), run_controls(runs)
    if not values:
        return None, None
    return (statistics.median(values),
            statistics.median(controls) if None not in controls else None)


def load_runs(results_dir: Union[str, Path], stack: Optional[str] = None,
              metrics: bool = True) -> tuple[list[Run], str]:
    """The stored runs of one device and stack kind, oldest first, and what was chosen.

    Default: the device and stack kind of the newest results file; ``stack`` restricts
    to one stack id.
    """
    from harness.results import SchemaError, load, results_files
    from harness.stack import split_stack_id
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
        for record_id, rec in result.records.items():
            bench, control = _run_value(rec.info)
            if bench is not None:
                values[record_id] = bench
                if control is not None:
                    controls[record_id] = control
                continue
            if not metrics or rec.status not in ("pass", "fail", "slower"):
                continue
            for name, value in rec.metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) \
                        and math.isfinite(value):
                    values[f"{record_id}:{name}"] = float(value)
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
        if len(points) < 2 * MIN_SIZE:
            continue
        series = [runs[i].values[name] for i in points]
        changes = change_points(series, **kwargs)
        controls = [runs[i].controls.get(name) for i in points]
        adjusted = all(c is not None for c in controls)
        if adjusted:  # Note [Change points]: judged as the verdict judges, host-adjusted
            series = host_adjusted(series, controls, [c.index for c in changes])
            changes = change_points(series, **kwargs)
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
