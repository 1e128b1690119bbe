"""The fleet picture: ``python -m harness report --matrix``, one page over the store.

Rows are device slugs and, within each, stacks (newest last); columns are check families
(a record id's first part). A cell is the latest run of that slug and stack judged by
:func:`harness.verdict.judge` on the family's records alone (against the same family of
the baseline the run compared with, when that file is there), with its counts, a
sparkline of the last nights' verdicts and a link to the run's results file (a family
whose records are all skips was not run: no cell). A slug's
stack upgrades inside the window are listed with the night they happened. Rendered by
Jinja2 templates (``templates/matrix.html.j2``, ``matrix.md.j2``) with autoescaping.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

WINDOW = 30
COLOURS = {"NO-GO": "#c62828", "REVIEW": "#ef8f00", "GO": "#2e7d32"}


@dataclasses.dataclass
class Cell:
    level: str
    counts: dict
    nights: list  # (started, level), oldest first
    link: str
    faults: list


@dataclasses.dataclass
class Row:
    device: str
    stack: str
    cells: dict  # family -> Cell
    started: str


def _family(run, family: str):
    from harness.results import RunResults

    records = {rid: rec for rid, rec in run.records.items() if rec.suite == family}
    tests = {rec.test for rec in records.values()}
    return RunResults(run.fingerprint, records, run.started, run.finished, run.seed,
                      {n: o for n, o in run.outcomes.items() if n in tests}, [], run.baseline,
                      run.faults, run.complete, None, run.selection, run.errors)


def build(store, window: int = WINDOW) -> tuple[list[Row], dict, list[str]]:
    """``(rows, upgrades per device, families)`` of the matrix (Note in the module)."""
    from harness import results
    from harness.ids import Status
    from harness.stack import stack_sort_key
    from harness.verdict import judge, status_counts

    stored = store.runs()
    by_series: dict[tuple[str, str], list] = {}
    for row in stored:
        by_series.setdefault((f"{row.device_type}/{row.device_slug}", row.stack_id),
                             []).append(row)
    baselines: dict[str, Optional[object]] = {}

    def baseline_of(path: Optional[str]):
        if not path:
            return None
        if path not in baselines:
            try:
                baselines[path] = results.load(path) if Path(path).is_file() else None
            except results.SchemaError:
                baselines[path] = None
        return baselines[path]

    out: list[Row] = []
    families: set[str] = set()
    for (device, stack), runs in by_series.items():
        nights = runs[-window:]
        levels: dict[str, list] = {}
        latest_cells: dict[str, Cell] = {}
        for k, stored_run in enumerate(nights):
            run = store.load(stored_run.pk)
            base = baseline_of(run.baseline)
            # a family whose every record is a skip (an opt-in family not selected, as
            # benchmarks are by default) was not run: no cell, rather than the
            # NO-GO of "nothing checked" that judging it alone would give
            for family in sorted({rec.suite for rec in run.records.values()
                                  if rec.status != Status.SKIP}):
                families.add(family)
                judged = judge(_family(run, family), _family(base, family) if base else None,
                               baseline_name=Path(run.baseline or "").stem)
                levels.setdefault(family, []).append((stored_run.started, judged.level))
                if k == len(nights) - 1:
                    counts = status_counts(run).get(family, {})
                    latest_cells[family] = Cell(judged.level, counts, [], stored_run.source,
                                                list(run.faults))
        for family, cell in latest_cells.items():
            cell.nights = levels[family]
        out.append(Row(device, stack, latest_cells, nights[-1].started))
    out.sort(key=lambda r: (r.device, stack_sort_key(r.stack)))
    upgrades: dict[str, list[str]] = {}
    recent = sorted(stored, key=lambda r: (r.started, r.pk))
    last: dict[str, str] = {}
    for row in recent[-window * max(1, len(by_series)):]:
        device = f"{row.device_type}/{row.device_slug}"
        if device in last and last[device] != row.stack_id:
            upgrades.setdefault(device, []).append(
                f"{last[device]} -> {row.stack_id} on {row.started}")
        last[device] = row.stack_id
    return out, upgrades, sorted(families)


def sparkline(nights: list, width: int = 4, height: int = 14) -> str:
    """An inline SVG: one bar per night, coloured by its verdict (oldest left)."""
    bars = "".join(f'<rect x="{i * (width + 1)}" y="0" width="{width}" height="{height}" '
                   f'fill="{COLOURS.get(level, "#999")}"><title>{started}: {level}</title></rect>'
                   for i, (started, level) in enumerate(nights))
    return (f'<svg class="spark" width="{max(1, len(nights)) * (width + 1)}" height="{height}" '
            f'role="img" aria-label="last {len(nights)} nights">{bars}</svg>')


def render(store, url: str, html: Optional[str], md: Optional[str]) -> list[Path]:
    """Write the matrix page (HTML, Markdown); the paths written."""
    from harness.results import atomic_write_text
    from harness.session import utc_now

    rows, upgrades, families = build(store)
    context = dict(rows=rows, upgrades=upgrades, families=families, store=url,
                   made=utc_now(), colours=COLOURS, window=WINDOW)
    from harness.report.templating import render as render_template

    written = []
    for path, name in ((html, "matrix.html.j2"), (md, "matrix.md.j2")):
        if path:
            atomic_write_text(path, render_template(name, **context))
            written.append(Path(path))
    return written
