"""The report as HTML (one self-contained file), Markdown, and the terminal's few lines.

All three read the same :class:`~harness.report.model.Report` and show the same sections
in the same order: verdict, counts per suite, probable common cause, the ranked groups,
top movers within their rules, stack diff, pictures, new / lost / not-run records. The
verdict, its notes and its lost capabilities are :func:`harness.verdict.judge`'s, shown
as given. The HTML
embeds its plots as inline SVG and its CSS in a ``<style>`` element: it loads nothing.
"""

from __future__ import annotations

import html
from typing import Optional

from harness.report.model import RANKS, Report, Subject, fmt, fmt_ratio
from harness.verdict import KNOWN_STATUS

COUNT_COLUMNS = ("records", "pass", "fail", KNOWN_STATUS, "error", "unsupported", "fallback",
                 "skip", "slower", "regression", "review", "improvement", "new", "lost", "not-run")
MOVERS_PER_SUITE = 10


# ---------------------------------------------------------------------------- shared

def _compared_line(report: Report) -> str:
    fp = report.run.fingerprint
    if report.baseline is None:
        return (f"{fp.get('stack_id')} on {fp.get('device_type')}/{fp.get('device_slug')}: "
                f"NOT COMPARED ({report.not_compared})")
    old = report.baseline.fingerprint
    why = report.baseline_reason or report.baseline_name or old.get("stack_id")
    return (f"{old.get('stack_id')} -> {fp.get('stack_id')} on {fp.get('device_type')}/"
            f"{fp.get('device_slug')}; baseline {why}")


def _notes(report: Report) -> list[str]:
    """How the compared runs differ, and the faults (Note [Honest comparisons])."""
    return [f"NOTE {note}" for note in report.verdict.notes]


def _summary(report: Report) -> str:
    groups = len(report.subjects)
    lines = report.finding_lines
    if report.baseline is None:
        return f"{groups} subject(s) fail their checks."
    movers = sum(len(v) for v in report.movers.values())
    return (f"{lines} finding line(s) in {groups} group(s); {movers} subject(s) moved within "
            "their rules.")


def _worst(subject: Subject) -> str:
    return subject.worst.describe() if subject.worst else subject.status


def _rule(subject: Subject) -> str:
    change = subject.worst
    if change is None or change.rule is None:
        return ""
    return change.rule.describe()


def _state(subject: Subject) -> str:
    old = f"{subject.old_status} -> " if subject.old_status and \
        subject.old_status != subject.status else ""
    if subject.known:
        return f"{old}{subject.status} ({subject.known})"
    return f"{old}{subject.status}" + ("" if subject.passes else " (check fails)")


def _what(subject: Subject) -> str:
    extra = f" ({subject.lines} finding lines)" if subject.lines > 1 else ""
    return f"{subject.rank_label}{extra}"


# ---------------------------------------------------------------------------- terminal

def terminal_lines(report: Report, limit: int = 10) -> list[str]:
    """The verdict line, counts per suite, the top ``limit`` groups, the report's path.

    Each subject appears once, whatever the number of its finding lines.
    """
    lines = [report.verdict.line, _compared_line(report)]
    counts = []
    for suite, row in report.counts.items():
        bad = ", ".join(f"{row[k]} {k}" for k in ("fail", KNOWN_STATUS, "error", "slower",
                                                  "regression", "review", "lost") if row.get(k))
        counts.append(f"{suite} {row.get('records', 0)}" + (f" ({bad})" if bad else ""))
    lines.append("suites: " + "; ".join(counts))
    lines += _notes(report)
    lost = report.verdict.lost
    if lost:
        lines.append(f"LOST ({len(lost)}): capabilities and records the baseline had:")
        lines += [f"  {line}" for line in lost[:limit]]
        if len(lost) > limit:
            lines.append(f"  ... {len(lost) - limit} more in the report")
    for cause in report.causes[:1]:
        lines.append(f"probable common cause: {cause.line}")
    if report.dispatch_changes:
        lines.append("dispatched differently since the baseline: "
                     + "; ".join(report.dispatch_changes[:4]))
    if report.subjects:
        lines.append(f"{len(report.subjects)} group(s) to look at"
                     + (f" ({report.finding_lines} finding lines)" if report.finding_lines
                        else "") + ", worst first:")
    for subject in report.subjects[:limit]:
        lines.append(f"  [{subject.rank_label}] {subject.id}: {_worst(subject)}"
                     + (f" [{_rule(subject)}]" if _rule(subject) else "")
                     + ("" if subject.passes else
                        " KNOWN FAILURE" if subject.known else " FAILS"))
        if subject.reproduce:
            lines.append(f"      {subject.reproduce}")
    if len(report.subjects) > limit:
        lines.append(f"  ... {len(report.subjects) - limit} more in the report")
    if report.path:
        lines.append(f"report: {report.path}")
    return lines


# ---------------------------------------------------------------------------- markdown

def md_cell(text: object) -> str:
    """``text`` as one Markdown table cell (pipes escaped, one line)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(report: Report, plots_note: str = "") -> str:
    """The report as Markdown: the same sections as the HTML, plots named but not drawn."""
    v = report.verdict
    out = [f"# {v.line}", "", f"**{_compared_line(report)}**", ""]
    out += [f"**{note}**  " for note in _notes(report)]
    if v.lost:
        out += ["", f"## Lost ({len(v.lost)})", ""] + [f"- {md_cell(x)}" for x in v.lost]
    out += ["", _summary(report), ""]
    out += ["## Counts per suite", "", "| suite | " + " | ".join(COUNT_COLUMNS) + " |",
            "|---|" + "---:|" * len(COUNT_COLUMNS)]
    for suite, row in report.counts.items():
        out.append(f"| {suite} | " + " | ".join(str(row.get(k, 0) or "") for k in COUNT_COLUMNS)
                   + " |")
    out += ["", "## Probable common cause", ""]
    if report.causes:
        out += [f"- {c.line}" for c in report.causes]  # a list item: pipes need no escape
    else:
        out.append(report.cause_note or "nothing to explain: no subject moved beyond its rule")
    if report.dispatch_changes:
        out += ["", "Dispatched differently since the baseline (affected records):", ""]
        out += [f"- {line}" for line in report.dispatch_changes]
    out += ["", f"## Groups, ranked ({len(report.subjects)})", ""]
    if report.subjects:
        out += ["| # | subject | what | worst metric (old -> new, ratio) | rule | standard | "
                "status | reproduce |", "|---:|---|---|---|---|---|---|---|"]
        for index, s in enumerate(report.subjects, 1):
            standard = s.standard
            out.append(f"| {index} | `{s.id}` | {_what(s)} | {md_cell(_worst(s))} | "
                       f"{md_cell(_rule(s))} | {md_cell(standard)} | {_state(s)} | "
                       f"`{md_cell(s.reproduce)}` |")
    else:
        out.append("none")
    out += ["", "## Top movers within their rules", ""]
    if not report.movers:
        out.append("none" if report.baseline is not None else "not compared")
    for suite, subjects in report.movers.items():
        out += [f"### {suite} ({len(subjects)} moved)", "",
                "| subject | metric (old -> new) | ratio | rule |", "|---|---|---:|---|"]
        for s in subjects[:MOVERS_PER_SUITE]:
            c = s.worst
            out.append(f"| `{s.id}` | {md_cell(c.describe())} | {fmt_ratio(c.ratio)} | "
                       f"{md_cell(c.rule.describe() if c.rule else '')} |")
        out.append("")
    out += ["", "## Stack", "", "| | baseline | this run |", "|---|---|---|"]
    for row in report.stack:
        mark = " **(changed)**" if row.differs and report.baseline is not None else ""
        out.append(f"| {row.key}{mark} | {md_cell(fmt(row.old)) if report.baseline else ''} | "
                   f"{md_cell(fmt(row.new))} |")
    if v.detectable:
        from harness.regress import detectable_md

        out += ["", "## Benchmarks: the smallest slow-down each can detect", ""]
        out += detectable_md(v.detectable)
    out += ["", "## Pictures", "", plots_note or "See the HTML report (inline SVG plots).", ""]
    out += _presence_md(report)
    return "\n".join(out) + "\n"


def _presence_md(report: Report) -> list[str]:
    out = []
    for name, ids in (("New records", report.new),
                      ("Lost records (their checks ran and did not record them)", report.lost),
                      ("Not run (their checks were not selected)", report.not_run)):
        out += [f"## {name} ({len(ids)})", ""]
        out += [f"- `{rid}`" for rid in ids[:50]] or ["none"]
        if len(ids) > 50:
            out.append(f"- ... {len(ids) - 50} more")
        out.append("")
    return out


# -------------------------------------------------------------------------------- html

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;
 color:#1d1d1f;background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:18px 24px 48px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid
 #d9dde3;padding-bottom:4px}h3{font-size:14px;margin:16px 0 6px}
.verdict{padding:14px 18px;border-radius:8px;color:#fff;margin:0 0 10px}
.NO-GO{background:#b03a2e}.REVIEW{background:#b9770e}.GO{background:#1e8449}
.verdict p{margin:4px 0 0;opacity:.95}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}
th,td{border:1px solid #e1e4e8;padding:4px 7px;text-align:left;vertical-align:top}
th{background:#eef1f4;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
code{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;overflow-wrap:anywhere}
.cause{background:#fff;border-left:4px solid #b9770e;padding:8px 12px;margin:12px 0}
.cause ul{margin:4px 0}
.r0 td:first-child{border-left:4px solid #7b241c}.r1 td:first-child{border-left:4px solid
 #c0392b}.r2 td:first-child{border-left:4px solid #e67e22}
.changed td{background:#fff4e0;font-weight:600}.fails{color:#b03a2e;font-weight:600}
.plot{background:#fff;border:1px solid #e1e4e8;border-radius:6px;padding:8px;margin:10px 0;
 overflow-x:auto}.plot svg{max-width:100%;height:auto}.note{color:#566}
nav a{margin-right:12px;color:#1f5f8b}
"""

SECTIONS = (("cause", "Common cause"), ("groups", "Groups"), ("counts", "Counts"),
            ("movers", "Top movers"), ("stack", "Stack"), ("plots", "Pictures"),
            ("presence", "New / lost / not run"))


def escape(text: object) -> str:
    """``text`` safe in HTML text and attribute values."""
    return html.escape(str(text), quote=True)


def page_head(title: str, css: str = CSS) -> list[str]:
    """A self-contained page's opening lines, up to ``<main>``: ``title`` and inline ``css``."""
    return ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{escape(title)}</title><style>{css}</style></head><body><main>"]


def html_page(report: Report, plots: list[tuple[str, str]], notes: list[str],
              title: Optional[str] = None) -> str:
    """The report as one self-contained HTML page (inline CSS and SVG, no scripts),
    rendered by ``templates/report.html.j2`` with autoescaping (harness/report/templating.py)."""
    from markupsafe import Markup

    from harness.regress import DETECTABLE_COLUMNS, detectable_cells
    from harness.report.templating import render

    v = report.verdict
    compared = report.baseline is not None
    groups = [dict(rank=s.rank, id=s.id, what=_what(s), worst=_worst(s),
                   record=s.worst.record_id if s.worst else "", rule=_rule(s),
                   standard=s.standard, passes=s.passes, state=_state(s), message=s.message,
                   reproduce=s.reproduce) for s in report.subjects]
    movers = [(suite, len(subjects),
               [dict(id=s.id, metric=s.worst.metric_label, old=fmt(s.worst.old),
                     new=fmt(s.worst.new), ratio=fmt_ratio(s.worst.ratio),
                     rule=s.worst.rule.describe() if s.worst.rule else "")
                for s in subjects[:MOVERS_PER_SUITE]])
              for suite, subjects in report.movers.items()]
    stack = [dict(key=row.key, changed=compared and row.differs,
                  old=fmt(row.old) if compared else "-", new=fmt(row.new))
             for row in report.stack]
    return render(
        "report.html.j2", title=title or f"{v.level}: {_compared_line(report)}",
        css=Markup(CSS), v=v, compared=_compared_line(report), notes_of_run=_notes(report),
        summary=_summary(report), sections=SECTIONS, causes=[c.line for c in report.causes],
        cause_note=report.cause_note, dispatch_changes=report.dispatch_changes,
        ranks=RANKS[:3], groups=groups, count_columns=COUNT_COLUMNS,
        counts=list(report.counts.items()), movers=movers, compared_with_baseline=compared,
        stack=stack, detectable_columns=DETECTABLE_COLUMNS,
        detectable=[detectable_cells(row) for row in v.detectable or ()],
        plot_notes=notes, plots=plots,
        presence=[("new", report.new), ("lost (their checks ran)", report.lost),
                  ("not run (not selected)", report.not_run)])
