"""The parity report: will training behave on this device as it did on the reference device?

Renders a :class:`~harness.parity.model.Parity` (what :func:`harness.parity.compare`
returns) three ways, each showing the same things in the same order: the verdict with its
exit code and reasons, the two runs, then per section (:data:`harness.parity.model.SECTIONS`)
what was compared, why anything was not, and the ranked differences each with the command
that reruns it, and last the thresholds with their sources.

* :func:`terminal_lines`: the few lines ``python -m harness parity`` prints;
* the Markdown and HTML reports (the go/no-go report's machinery) follow.

Nothing here judges: the verdict, the ranking and every number are the comparison's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

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
        out.append(f"{len(blockers)} blocker(s), the migration must work around them: "
                   + _by_section(blockers))
    if others:
        out.append(f"{len(others)} difference(s) beyond the thresholds: " + _by_section(others))
    if not parity.differences:
        out.append(f"no difference beyond the thresholds in {compared} compared subject(s)")
    missing = [s for s in SECTIONS if s in parity.not_compared]
    if missing:
        out.append("not (fully) compared: " + ", ".join(missing))
    return out


def _by_section(diffs: list[Difference]) -> str:
    counts = {s: sum(1 for d in diffs if d.section == s) for s in SECTIONS}
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n)


def side_line(label: str, side: RunSide) -> str:
    started = f", started {side.started}" if side.started else ""
    return f"{label}: {side.name} ({side.path}{started})"


def section_line(parity: Parity, section: str) -> str:
    """``ops: 120 compared, 1 blocker, 2 differences; not compared: ...``."""
    diffs = parity.by_section(section)
    blockers = sum(1 for d in diffs if d.severity == "blocker")
    parts = [f"{parity.compared.get(section, 0)} compared"]
    if blockers:
        parts.append(f"{blockers} blocker(s)")
    if len(diffs) - blockers:
        parts.append(f"{len(diffs) - blockers} difference(s)")
    text = f"{section}: " + ", ".join(parts)
    if section in parity.not_compared:
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


# ---------------------------------------------------------------------------- terminal

def terminal_lines(parity: Parity, limit: int = 10) -> list[str]:
    """The verdict line, the two runs, per-section counts, the top ``limit`` differences."""
    lines = [verdict_line(parity) + ": " + "; ".join(reasons(parity)),
             side_line("reference", parity.reference), side_line("here", parity.here)]
    lines += [section_line(parity, s) for s in SECTIONS]
    if parity.differences:
        lines.append(f"{len(parity.differences)} difference(s), worst first:")
    for diff in parity.differences[:limit]:
        ratio = f" ({fmt_ratio(diff.ratio)})" if diff.ratio is not None else ""
        lines.append(f"  [{diff.severity}] {diff.section} {diff.id}: {diff.summary}{ratio}")
        if diff.reproduce:
            lines.append(f"      {diff.reproduce}")
    if len(parity.differences) > limit:
        lines.append(f"  ... {len(parity.differences) - limit} more in the report "
                     "(--html PATH or --md PATH)")
    return lines
