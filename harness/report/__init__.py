"""The go/no-go report: one run against its baseline, grouped, ranked, explained.

:func:`build` makes the :class:`~harness.report.model.Report` from stored values;
:func:`write` renders it to ``PATH`` (HTML, self-contained) and ``PATH``'s ``.md``
sibling (Markdown); :func:`terminal_lines` is the terminal summary's share of it.
:func:`write_for_session` is what the pytest plugin calls for ``--report PATH``;
``python -m harness report`` builds the same from files (:func:`from_files`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

from harness.report.aten import capture_aten_ops
from harness.report.model import Report, build, subject_of
from harness.report.render import terminal_lines
from harness.results import RunResults, atomic_write_text

__all__ = ["Report", "build", "capture_aten_ops", "from_files", "markdown_path", "subject_of",
           "terminal_lines", "write", "write_for_session"]


def markdown_path(path: Union[str, Path], taken: Optional[Union[str, Path]] = None) -> Path:
    """The Markdown sibling of an HTML report path (``x.html`` -> ``x.md``); ``x.report.md``
    where that is ``taken`` (``--alerts x.json`` writes ``x.md`` too)."""
    path = Path(path)
    md = path.with_suffix(".md")
    if md == path or (taken is not None and md == Path(taken)):
        md = path.with_suffix(".report.md")
    return md


def write(report: Report, html_path: Optional[Union[str, Path]] = None,
          md_path: Optional[Union[str, Path]] = None) -> list[Path]:
    """Render ``report`` to HTML and/or Markdown; returns the paths written."""
    from harness.report import plots, render

    written: list[Path] = []
    svgs, notes = plots.render_all(report) if html_path is not None else ([], [])
    if html_path is not None:
        report.path = str(html_path)
        atomic_write_text(html_path, render.html_page(report, svgs, notes))
        written.append(Path(html_path))
    if md_path is not None:
        note = "; ".join(notes) if notes else (
            f"{len(svgs)} plot(s) in the HTML report: " + ", ".join(t for t, _ in svgs)
            if svgs else "")
        atomic_write_text(md_path, render.markdown(report, note))
        written.append(Path(md_path))
    return written


def write_for_session(run: RunResults, baseline: Optional[RunResults], verdict: Any,
                      path: Union[str, Path], baseline_name: str = "",
                      alerts: Optional[Union[str, Path]] = None, baseline_reason: str = ""
                      ) -> tuple[Report, list[Path]]:
    """``--report PATH``: the run's report to ``PATH`` and its ``.md`` sibling.

    ``verdict`` is the session's (:func:`harness.verdict.judge`); ``alerts`` is the
    ``--alerts`` path, whose Markdown sibling the report must not take.
    """
    report = build(run, baseline, verdict, baseline_name=baseline_name,
                   baseline_reason=baseline_reason)
    taken = Path(alerts).with_suffix(".md") if alerts is not None else None
    return report, write(report, path, markdown_path(path, taken))


def from_files(results_path: Union[str, Path], baseline_path: Optional[Union[str, Path]]
               ) -> Report:
    """The report of a stored results file against a stored baseline file (or alone)."""
    from harness import results as results_mod

    run = results_mod.load(results_path)
    if baseline_path is None:
        return build(run, None, not_compared="no baseline given")
    base = results_mod.load(baseline_path)
    return build(run, base, baseline_name=Path(baseline_path).stem)
