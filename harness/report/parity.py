"""The parity report: will training behave on this device as it did on the reference device?

Renders a :class:`~harness.parity.model.Parity` (what :func:`harness.parity.compare`
returns) three ways, each showing the same things in the same order: the verdict with its
exit code and reasons, the two runs, then per section (:data:`harness.parity.model.SECTIONS`)
what was compared, why anything was not, and the ranked differences each with the command
that reruns it, and last the thresholds with their sources.

* :func:`terminal_lines`: the few lines ``python -m harness parity`` prints;
* :func:`markdown`: the same tables as Markdown, the pictures named;
* :func:`html_page`: one self-contained page: the go/no-go report's CSS and escaping
  (:mod:`harness.report.render`), inline SVG pictures from
  :mod:`harness.report.parity_plots` (the go/no-go report's matplotlib helpers), no
  scripts, nothing loaded;
* :func:`write`: either or both to files (``--html PATH``, ``--md PATH``), atomically.

Differences are shown grouped per op or subject (Note [Parity groups]), every record
still listed with its own reproduce command.

Nothing here judges: the verdict, the ranking and every number are the comparison's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional, Union

from harness import ids
from harness.parity.model import SECTIONS, Difference, Parity, RunSide

SECTION_TITLES = {"ops": "Ops", "training": "Training", "memory": "Memory", "speed": "Speed",
                  "model": "Your model"}


# ---------------------------------------------------------------------------- shared

def verdict_line(parity: Parity) -> str:
    """``PARITY: BLOCKERS (exit 1)``: the one line a script or a person acts on."""
    return f"PARITY: {parity.verdict} (exit {parity.exit_code})"


def reasons(parity: Parity) -> list[str]:
    """Why the verdict is what it is, in words (counted from the differences as given)."""
    blockers = [d for d in parity.differences if d.severity == "blocker"]
    others = [d for d in parity.differences if d.severity != "blocker"]
    compared = sum(parity.compared.values())
    out = []
    if blockers:
        found = [g for g in groups(parity) if g.severity == "blocker"]
        named = ", ".join(f"{g.subject} ({len(g.members)})" for g in found[:8])
        more = f", {len(found) - 8} more" if len(found) > 8 else ""
        out.append(f"{len(blockers)} blocker(s) in {len(found)} group(s), the migration must "
                   f"work around them: {named}{more}")
    if others:
        out.append(f"{len(others)} difference(s) beyond the thresholds: " + _by_section(others))
    if not parity.differences:
        out.append(f"no difference beyond the thresholds in {compared} compared subject(s)")
    missing = [s for s in SECTIONS if s in parity.not_compared]
    if missing:
        out.append("not (fully) compared: " + ", ".join(missing))
    return out


def run_notes(parity: Parity) -> list[str]:
    """How the two runs differ in what they measured (seeds, selections, injected faults):
    compared all the same, and said wherever the verdict is."""
    return list(parity.notes)


def _by_section(diffs: list[Difference]) -> str:
    counts = {s: sum(1 for d in diffs if d.section == s) for s in SECTIONS}
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n)


def side_line(label: str, side: RunSide) -> str:
    started = f", started {side.started}" if side.started else ""
    return f"{label}: {side.name} ({side.path}{started})"


def section_line(parity: Parity, section: str, why: bool = True) -> str:
    """``ops: 120 compared, 1 blocker, 2 differences; NOT COMPARED: ...`` (``why``: with
    the reason something was not compared)."""
    diffs = parity.by_section(section)
    blockers = sum(1 for d in diffs if d.severity == "blocker")
    parts = [f"{parity.compared.get(section, 0)} compared"]
    if blockers:
        parts.append(f"{blockers} blocker(s)")
    if len(diffs) - blockers:
        parts.append(f"{len(diffs) - blockers} difference(s)")
    text = f"{section}: " + ", ".join(parts)
    if why and section in parity.not_compared:
        text += f"; NOT COMPARED: {parity.not_compared[section]}"
    return text


def fmt_ratio(ratio: Optional[float]) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.3g}x"


def fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={fmt_value(v)}" for k, v in value.items()) or "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt_value(v) for v in value) or "-"
    return "-" if value is None or value == "" else str(value)


# ---------------------------------------------------------------------------- groups

# Note [Parity groups]
# ~~~~~~~~~~~~~~~~~~~~
# The comparison ranks differences per record, and one missing kernel makes many: an op
# that falls back to the host fails every dtype, sample and direction of its catalog rows
# (30 records for one `exp`). A person decides per op, not per record (the go/no-go
# report's Note [Report subjects]), so every view groups before it lists: a group is the
# differences of one section and severity on one subject, the op (`ops/<op>`,
# `opinfo/<op>`) for op records, :func:`harness.ids.subject_of` for the others. A group
# keeps the rank of its worst member (the first, as the comparison ranked them), shows
# that member's summary and reproduce command, and says how many records and which dtypes
# it holds; the HTML and Markdown list every member with its own reproduce command below.

@dataclasses.dataclass
class Group:
    """The differences of one section and severity on one subject (Note [Parity groups])."""

    section: str
    severity: str
    subject: str
    members: list[Difference]

    @property
    def worst(self) -> Difference:
        return self.members[0]

    @property
    def dtypes(self) -> list[str]:
        found = {p for d in self.members for p in d.id.split("/") if p in DTYPE_NAMES}
        return sorted(found)

    def label(self) -> str:
        """``ops/exp (30 records: bfloat16, float16, float32)``; the id for one record."""
        if len(self.members) == 1:
            return self.worst.id
        dtypes = f": {', '.join(self.dtypes)}" if self.dtypes else ""
        return f"{self.subject} ({len(self.members)} records{dtypes})"


DTYPE_NAMES = frozenset({"float64", "float32", "float16", "bfloat16", "complex64",
                         "complex128", "int64", "int32", "int16", "int8", "uint8", "bool",
                         "float16-amp", "bfloat16-amp"})


def subject_of(diff: Difference) -> str:
    parts = diff.id.split("/")
    if parts[0] in ("ops", "opinfo") and len(parts) >= 3:
        return "/".join(parts[:2])
    return ids.subject_of(diff.id)


def groups(parity: Parity, section: Optional[str] = None) -> list[Group]:
    """The differences (of ``section``, or all) grouped, in the order of their worst member."""
    found: dict[tuple[str, str, str], Group] = {}
    for diff in parity.differences:
        if section is not None and diff.section != section:
            continue
        key = (diff.section, diff.severity, subject_of(diff))
        if key not in found:
            found[key] = Group(*key, members=[])
        found[key].members.append(diff)
    return list(found.values())


def _counted(diffs: list[Difference], found: list[Group]) -> str:
    return (f"{len(diffs)}" if len(found) == len(diffs)
            else f"{len(diffs)} records in {len(found)} groups")


def _what(group: Group) -> str:
    """The worst record's summary, and where the group holds more, which one it is."""
    if len(group.members) == 1:
        return group.worst.summary
    return f"{group.worst.id}: {group.worst.summary}"


# ---------------------------------------------------------------------------- terminal

def terminal_lines(parity: Parity, limit: int = 10) -> list[str]:
    """The verdict line, the two runs, per-section counts, the top ``limit`` groups of
    differences (Note [Parity groups]), each with its worst record's reproduce command."""
    lines = [verdict_line(parity) + ": " + "; ".join(reasons(parity)),
             side_line("reference", parity.reference), side_line("here", parity.here)]
    lines += [f"NOTE {note}" for note in run_notes(parity)]
    lines += [section_line(parity, s) for s in SECTIONS]
    found = groups(parity)
    if found:
        lines.append(f"{len(parity.differences)} difference(s) in {len(found)} group(s), "
                     "worst first:")
    for group in found[:limit]:
        diff = group.worst
        ratio = f" ({fmt_ratio(diff.ratio)})" if diff.ratio is not None else ""
        worst = f" worst {diff.id}:" if len(group.members) > 1 else ":"
        lines.append(f"  [{diff.severity}] {diff.section} {group.label()}{worst} "
                     f"{diff.summary}{ratio}")
        if diff.reproduce:
            lines.append(f"      {diff.reproduce}")
    if len(found) > limit:
        lines.append(f"  ... {len(found) - limit} more group(s) in the report "
                     "(--html PATH or --md PATH)")
    return lines


# ---------------------------------------------------------------------------- tables
# Both renderers draw the same tables from these rows (header, rows of cell text).

FINGERPRINT_KEYS = ("device_name", "device_count", "torch", "torch_npu", "cann", "driver",
                    "cuda_runtime", "cudnn", "cpu", "python", "host")
TOP_OPS = 20
MODEL_ROWS = 60


def _runs_table(parity: Parity) -> tuple[list[str], list[list[str]]]:
    ref, here = parity.reference, parity.here
    rows = [["device", f"{ref.device_type}/{ref.device_slug}",
             f"{here.device_type}/{here.device_slug}"],
            ["stack", ref.stack_id, here.stack_id],
            ["results file", ref.path, here.path],
            ["started", ref.started or "-", here.started or "-"]]
    for key in FINGERPRINT_KEYS:
        a, b = ref.fingerprint.get(key), here.fingerprint.get(key)
        if a is not None or b is not None:
            rows.append([key, fmt_value(a), fmt_value(b)])
    return ["", "reference", "here"], rows


def _section_tables(parity: Parity, section: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """The compared values of a section as ``(caption, header, rows)`` tables."""
    if section == "ops":
        rows = sorted((r for r in parity.op_ratios
                       if isinstance(r.get("ratio"), (int, float)) and r["ratio"] > 1),
                      key=lambda r: -r["ratio"])
        shown = f", the worst {TOP_OPS} shown" if len(rows) > TOP_OPS else ""
        caption = (f"Error ratios above 1 ({len(rows)} of {len(parity.op_ratios)} compared "
                   f"records{shown}; worst first)" if rows else
                   f"Error ratios above 1 (of {len(parity.op_ratios)} compared records)")
        return [(caption, ["op", "dtype", "error ratio", "record"],
                 [[str(r.get("op")), str(r.get("dtype")), fmt_ratio(r["ratio"]), str(r.get("id"))]
                  for r in rows[:TOP_OPS]])] if parity.op_ratios else []
    if section == "training":
        rows = []
        for c in parity.curves:
            ref, here = c.get("reference") or [], c.get("here") or []
            rows.append([str(c.get("label") or c.get("id")), f"{len(ref)} / {len(here)}",
                         fmt_value(ref[-1] if ref else None), fmt_value(here[-1] if here else None)])
        return [("Loss curves", ["curve", "steps (reference / here)", "final loss reference",
                                 "final loss here"], rows)] if rows else []
    if section == "memory":
        rows = [[str(r.get("id")), str(r.get("metric")), fmt_value(r.get("reference")),
                 fmt_value(r.get("here")), fmt_ratio(r.get("ratio"))] for r in parity.memory]
        return [("Memory, same cap", ["case", "metric", "reference", "here", "ratio"],
                 rows)] if rows else []
    if section == "speed":
        rows = [[str(r.get("id")), str(r.get("precision")), _with_unit(r, "reference"),
                 _with_unit(r, "here"), fmt_ratio(r.get("ratio"))]
                for r in sorted(parity.speed, key=_speed_order)]
        return [("Throughput, same batch size and precision (ratio: throughput here / "
                 "reference)", ["benchmark", "precision", "reference", "here", "ratio"],
                 rows)] if rows else []
    if section == "model":
        differ = [r for r in parity.models if r.get("reference") != r.get("here")]
        same = [r for r in parity.models if r.get("reference") == r.get("here")]
        shown = (differ + same)[:max(MODEL_ROWS, len(differ))]
        caption = (f"Model inventories side by side ({len(differ)} op(s) differ, "
                   f"{len(same)} the same"
                   + (f"; {len(parity.models) - len(shown)} of those not listed"
                      if len(shown) < len(parity.models) else "") + ")")
        return [(caption, ["op", "model", "reference", "here"],
                 [[str(r.get("op")), str(r.get("model") or "-"), fmt_value(r.get("reference")),
                   fmt_value(r.get("here"))] for r in shown])] if parity.models else []
    return []


def _with_unit(row: dict[str, Any], side: str) -> str:
    unit = row.get("unit")
    return fmt_value(row.get(side)) + (f" {unit}" if unit else "")


def _speed_order(row: dict[str, Any]) -> tuple:
    """Per benchmark, fp32 first: the precisions of one benchmark side by side."""
    from harness.report.parity_plots import benchmark_of, precision_order

    return benchmark_of(row), precision_order(str(row.get("precision"))), str(row.get("id"))


def threshold_rows(thresholds: dict[str, Any], prefix: str = "") -> list[list[str]]:
    """``[name, value, source]`` per threshold; a dict holding ``source`` is one threshold
    (its other items are the value), any other dict groups thresholds by name."""
    rows = []
    for key, value in thresholds.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and "source" not in value and value:
            rows += threshold_rows(value, f"{name}.")
        elif isinstance(value, dict):
            rest = {k: v for k, v in value.items() if k != "source"}
            rows.append([name, _threshold_value(rest), str(value.get("source") or "-")])
        else:
            rows.append([name, fmt_value(value), "-"])
    return rows


def _threshold_value(items: dict[str, Any]) -> str:
    """``below=0.9``; ``eps of the dtype; eps: float32=1.192e-07, ...`` (a ``value`` item
    is shown bare, a table of values after its name)."""
    parts = [fmt_value(items["value"])] if "value" in items else []
    flat = [f"{k}={fmt_value(v)}" for k, v in items.items()
            if k != "value" and not isinstance(v, dict)]
    if flat:
        parts.append(", ".join(flat))
    parts += [f"{k}: {fmt_value(v)}" for k, v in items.items()
              if k != "value" and isinstance(v, dict)]
    return "; ".join(parts) or "-"


def _not_compared(parity: Parity, section: str) -> Optional[str]:
    if section in parity.not_compared:
        return parity.not_compared[section]
    if not parity.compared.get(section):
        return "nothing compared (the comparison gave no reason)"
    return None


# ---------------------------------------------------------------------------- markdown

def _md_table(header: list[str], rows: list[list[str]], code: int = -1) -> list[str]:
    from harness.report.render import md_cell

    out = ["| " + " | ".join(md_cell(h) for h in header) + " |",
           "|" + "---|" * len(header)]
    for row in rows:
        out.append("| " + " | ".join(f"`{md_cell(c)}`" if i == code else md_cell(c)
                                     for i, c in enumerate(row)) + " |")
    return out


def markdown(parity: Parity, pictures: Optional[dict[str, list[str]]] = None,
             picture_note: str = "") -> str:
    """The report as Markdown: the HTML's sections and tables; pictures named, not drawn.

    ``pictures`` maps a section to the titles of its pictures in the HTML report;
    ``picture_note`` says where that report is, or why it has no pictures.
    """
    from harness.report.render import md_cell

    out = [f"# {verdict_line(parity)}", ""]
    out += [f"- {r}" for r in reasons(parity)]
    out += [f"- **NOTE** {note}" for note in run_notes(parity)]
    header, rows = _runs_table(parity)
    out += ["", "## Runs", ""] + _md_table(header, rows)
    if picture_note:
        out += ["", f"Pictures: {picture_note}"]
    for section in SECTIONS:
        diffs = parity.by_section(section)
        out += ["", f"## {SECTION_TITLES[section]}", "",
                f"**{section_line(parity, section, why=False)}**", ""]
        why = _not_compared(parity, section)
        if why:
            out += [f"> NOT COMPARED: {why}", ""]
        if diffs:
            found = groups(parity, section)
            out += [f"### Differences ({_counted(diffs, found)}), worst first", "",
                    "| # | severity | subject | what differs (its worst record) | reference | "
                    "here | ratio | reproduce (its worst record) |",
                    "|---:|---|---|---|---|---|---:|---|"]
            for index, group in enumerate(found, 1):
                d = group.worst
                out.append(f"| {index} | {d.severity} | `{md_cell(group.label())}` | "
                           f"{md_cell(_what(group))} | {md_cell(fmt_value(d.reference))} | "
                           f"{md_cell(fmt_value(d.here))} | {fmt_ratio(d.ratio)} | "
                           f"`{md_cell(d.reproduce)}` |")
            if len(found) < len(diffs):
                out += ["", f"#### Every record ({len(diffs)})", "",
                        "| # | record | what differs | ratio | reproduce |",
                        "|---|---|---|---:|---|"]
                for index, group in enumerate(found, 1):
                    for k, d in enumerate(group.members, 1):
                        out.append(f"| {index}.{k} | `{md_cell(d.id)}` | {md_cell(d.summary)} | "
                                   f"{fmt_ratio(d.ratio)} | `{md_cell(d.reproduce)}` |")
        else:
            out.append("No difference beyond the thresholds." if parity.compared.get(section)
                       else "No difference (nothing compared).")
        for caption, head, rows in _section_tables(parity, section):
            out += ["", f"### {caption}", ""]
            out += _md_table(head, rows, code=0) if rows else ["none"]
        for title in (pictures or {}).get(section, []):
            out += ["", f"Picture in the HTML report: {title}"]
    out += ["", "## Thresholds", ""]
    rows = threshold_rows(parity.thresholds)
    out += _md_table(["threshold", "value", "source"], rows, code=0) if rows else ["none given"]
    return "\n".join(out) + "\n"


# -------------------------------------------------------------------------------- html

PARITY_CSS = """
.PARITY{background:#1e8449}.DIFFERENCES{background:#b9770e}.BLOCKERS{background:#b03a2e}
.verdict ul{margin:6px 0 0 18px;padding:0}
tr.blocker td:first-child{border-left:4px solid #b03a2e}
tr.difference td:first-child{border-left:4px solid #e67e22}
td.repro{background:#fafbfc;color:#444}
.missing{background:#fff4e0;border-left:4px solid #b9770e;padding:6px 10px;margin:6px 0;
 font-weight:600}
.count{font-weight:600;margin:4px 0}
td.rid{min-width:15em}#thresholds td:first-child{white-space:nowrap}
details summary{cursor:pointer;color:#1f5f8b}details table{margin:4px 0 2px}
"""


def _html_table(header: list[str], rows: list[list[str]], code: int = -1,
                numeric: tuple[int, ...] = (), changed: tuple[int, int] = (-1, -1)) -> str:
    """A table; ``changed``: two columns whose cells, where they differ, mark the row."""
    from harness.report.render import escape

    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            text = f"<code>{escape(cell)}</code>" if i == code else escape(cell)
            cells.append(f'<td class="n">{text}</td>' if i in numeric else f"<td>{text}</td>")
        a, b = changed
        mark = ' class="changed"' if a >= 0 and row[a] != row[b] else ""
        body.append(f"<tr{mark}>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def html_page(parity: Parity, pictures: Optional[dict[str, list[tuple[str, str]]]] = None,
              notes: Optional[list[str]] = None) -> str:
    """The report as one self-contained HTML page (inline CSS and SVG, no scripts).

    ``pictures`` maps a section to its ``(title, svg)`` pictures and ``notes`` say why some
    are missing (:func:`harness.report.parity_plots.render_all`, drawn here when
    ``pictures`` is None; ``{}`` for a page without them).
    """
    from harness.report import parity_plots
    from harness.report.render import CSS, escape, page_head

    if pictures is None:
        pictures, notes = parity_plots.render_all(parity)
    out = page_head(f"{verdict_line(parity)}: {parity.reference.name} -> {parity.here.name}",
                    CSS + PARITY_CSS)
    out.append(f'<section id="verdict" class="verdict {escape(parity.verdict)}">'
               f"<h1>{escape(verdict_line(parity))}</h1>"
               f"<p><b>{escape(parity.here.name)}</b> compared with the reference "
               f"<b>{escape(parity.reference.name)}</b></p><ul>"
               + "".join(f"<li>{escape(r)}</li>" for r in reasons(parity)) + "</ul>"
               + "".join(f"<p><b>NOTE</b> {escape(n)}</p>" for n in run_notes(parity))
               + "</section>")
    links = [("runs", "Runs")] + [(s, SECTION_TITLES[s]) for s in SECTIONS] + \
        [("thresholds", "Thresholds")]
    out.append("<nav>" + "".join(f'<a href="#{k}">{escape(t)}</a>' for k, t in links) + "</nav>")
    header, rows = _runs_table(parity)
    out.append(f'<section id="runs"><h2>Runs</h2>{_html_table(header, rows)}</section>')
    out += [f'<p class="note">{escape(n)}</p>' for n in notes or []]
    for section in SECTIONS:
        out += _html_section(parity, section, pictures.get(section, []))
    rows = threshold_rows(parity.thresholds)
    out.append('<section id="thresholds"><h2>Thresholds</h2>'
               + (_html_table(["threshold", "value", "source"], rows, code=0) if rows
                  else "<p>none given</p>") + "</section>")
    out.append("</main></body></html>")
    return "\n".join(out) + "\n"


VISIBLE_GROUPS = 25
"""Groups of differences a section shows before folding the rest (the HTML)."""


def _html_group(index: int, group: Group) -> list[str]:
    """A group's rows: its worst record, that record's command, its records folded."""
    from harness.report.render import escape

    d = group.worst
    sev = escape(d.severity)
    out = [f'<tr class="{sev}"><td class="n">{index}</td><td>{sev}</td>'
           f'<td class="rid"><code>{escape(group.label())}</code></td>'
           f"<td>{escape(_what(group))}</td><td>{escape(fmt_value(d.reference))}</td>"
           f"<td>{escape(fmt_value(d.here))}</td>"
           f'<td class="n">{escape(fmt_ratio(d.ratio))}</td></tr>',
           f'<tr class="{sev}"><td></td><td class="repro" colspan="6">reproduce'
           f"{' (its worst record)' if len(group.members) > 1 else ''}: "
           f"<code>{escape(d.reproduce)}</code></td></tr>"]
    if len(group.members) > 1:
        rows = "".join(
            f'<tr><td class="rid"><code>{escape(m.id)}</code></td>'
            f"<td>{escape(m.summary)}</td>"
            f'<td class="n">{escape(fmt_ratio(m.ratio))}</td>'
            f"<td><code>{escape(m.reproduce)}</code></td></tr>" for m in group.members)
        out.append(f'<tr class="{sev}"><td></td><td colspan="6"><details><summary>'
                   f"the {len(group.members)} records, each with its reproduce command"
                   "</summary><table><tr><th>record</th><th>what differs</th>"
                   f"<th>ratio</th><th>reproduce</th></tr>{rows}</table></details></td></tr>")
    return out


def _html_section(parity: Parity, section: str, pictures: list[tuple[str, str]]) -> list[str]:
    from harness.report.render import escape

    diffs = parity.by_section(section)
    out = [f'<section id="{section}"><h2>{escape(SECTION_TITLES[section])}</h2>',
           f'<p class="count">{escape(section_line(parity, section, why=False))}</p>']
    why = _not_compared(parity, section)
    if why:
        out.append(f'<p class="missing">NOT COMPARED: {escape(why)}</p>')
    if diffs:
        found = groups(parity, section)
        head = ('<table class="diffs"><tr><th>#</th><th>severity</th><th>subject</th>'
                "<th>what differs (its worst record)</th><th>reference</th><th>here</th>"
                "<th>ratio</th></tr>")
        out.append(f"<h3>Differences ({escape(_counted(diffs, found))}), worst first</h3>"
                   + head)
        for index, group in enumerate(found[:VISIBLE_GROUPS], 1):
            out += _html_group(index, group)
        out.append("</table>")
        if len(found) > VISIBLE_GROUPS:  # the rest folded, so the pictures stay in reach
            out.append(f"<details><summary>{len(found) - VISIBLE_GROUPS} more group(s), "
                       "each with its records and their reproduce commands</summary>" + head)
            for index, group in enumerate(found[VISIBLE_GROUPS:], VISIBLE_GROUPS + 1):
                out += _html_group(index, group)
            out.append("</table></details>")
    else:
        out.append("<p>No difference beyond the thresholds.</p>" if parity.compared.get(section)
                   else "<p>No difference (nothing compared).</p>")
    for title, svg in pictures:
        out.append(f'<div class="plot"><h3>{escape(title)}</h3>{svg}</div>')
    for caption, head, rows in _section_tables(parity, section):
        numeric = tuple(i for i, h in enumerate(head) if h in ("ratio", "error ratio",
                                                                 "reference", "here"))
        changed = (-1, -1)
        if section == "model":  # statuses, not numbers; a row whose statuses differ is marked
            numeric, changed = (), (head.index("reference"), head.index("here"))
        out.append(f"<h3>{escape(caption)}</h3>"
                   + (_html_table(head, rows, code=0, numeric=numeric, changed=changed)
                      if rows else "<p>none</p>"))
    out.append("</section>")
    return out


# ------------------------------------------------------------------------------- write

def write(parity: Parity, html_path: Optional[Union[str, Path]] = None,
          md_path: Optional[Union[str, Path]] = None) -> list[Path]:
    """Render ``parity`` to HTML and/or Markdown (atomic writes); returns the paths written."""
    from harness.report import parity_plots
    from harness.results import atomic_write_text

    written: list[Path] = []
    pictures, notes = parity_plots.render_all(parity) if html_path is not None else ({}, [])
    if html_path is not None:
        atomic_write_text(html_path, html_page(parity, pictures, notes))
        written.append(Path(html_path))
    if md_path is not None:
        if html_path is None:
            note = ("the HTML report draws them (python -m harness parity ... --html PATH)")
        else:
            count = sum(len(v) for v in pictures.values())
            note = "; ".join(notes) if notes and not count else (
                f"{count} in the HTML report, {Path(html_path).name}"
                + (f" ({'; '.join(notes)})" if notes else ""))
        titles = {s: [t for t, _ in v] for s, v in pictures.items()}
        atomic_write_text(md_path, markdown(parity, titles, note))
        written.append(Path(md_path))
    return written
