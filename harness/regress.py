"""Current results vs a baseline -> findings (regression, review, improvement, new, lost,
not-run). The verdict over them is :func:`harness.verdict.judge`'s.

Note [Review or regression]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
A status that loses capability (a fall in :func:`harness.ids.rank`: pass ->
fail/error/slower/unsupported/fallback) is always a *regression*; so is a *lost* record: a
baseline record whose check ran in this run but did not record it (coverage lost). A
baseline record whose check was not selected (another ``-k``, ``-m``, path or an
``--op-filter`` that deselects its case) is *not run*: listed, never judged; so is one
the baseline holds as ``skip`` (an opt-in check it did not run: ``--run-slow``,
``--run-benchmarks``), which held no capability to lose when its check now runs and
records its own ids. A metric
that moves beyond its rule is what its rule's ``severity`` says
(:attr:`harness.results.Rule.alerts_as`): a *regression* where the change itself is the
loss (a lower max batch, another state dtype), else a *review*: the check still passes
its own standard, but its numbers moved more than the baseline allows, so a person should
look before accepting the stack. A regression fails the check that produced it and makes
the run NO-GO; a review makes it REVIEW and fails the check only with ``--fail-on
review`` (the fault check runs so, since drift faults are caught through the baseline).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from harness import ids
from harness.results import NON_FINITE, Record, Rule, RunResults, atomic_write_text


@dataclasses.dataclass(frozen=True)
class Finding:
    """One difference between a run and its baseline."""

    kind: str  # harness.verdict.FINDING_KINDS
    record_id: str
    metric: Optional[str] = None
    old: Any = None
    new: Any = None
    rule: Optional[dict] = None
    baseline: str = ""
    test: str = ""

    @property
    def message(self) -> str:
        where = f" (baseline {self.baseline})" if self.baseline else ""
        if self.kind == "new":
            return f"new: {self.record_id}{where}"
        if self.kind == "lost":
            return (f"lost: {self.record_id} (its check {self.test or '?'} ran and did not "
                    f"record it){where}")
        if self.kind == "not-run":
            return f"not run: {self.record_id} (its check was not selected){where}"
        if self.metric is None:
            return f"{self.kind}: {self.record_id} status {self.old} -> {self.new}{where}"
        rule = Rule.from_json(self.rule).describe() if self.rule else "no rule"
        return (f"{self.kind}: {self.record_id} {self.metric} {_fmt(self.old)} -> "
                f"{_fmt(self.new)} [{rule}]{where}")

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["message"] = self.message
        return {k: v for k, v in out.items() if v not in (None, "")}

    @classmethod
    def from_json(cls, data: dict) -> Finding:
        """The inverse of :meth:`to_json` (``message`` is derived, so it is dropped)."""
        return cls(**{k: v for k, v in data.items() if k != "message"})


def _fmt(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else repr(value)


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or value is None:
        return None if value is None else float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in NON_FINITE:
        return float(value)
    return None


def judge(old: Any, new: Any, rule: Rule, old_spread: Any = None,
          new_spread: Any = None) -> Optional[str]:
    """``"regression"``, ``"improvement"`` or None for one metric under its rule."""
    a, b = _number(old), _number(new)
    if a is None or b is None:
        return None if old == new else ("regression" if rule.better == "equal" else None)
    if math.isnan(a) or math.isnan(b):
        if math.isnan(a) and math.isnan(b):
            return None
        return "regression" if math.isnan(b) else "improvement"
    if rule.noise is not None:
        spread = math.hypot(_number(old_spread) or 0.0, _number(new_spread) or 0.0)
        if abs(b - a) <= rule.noise * spread:
            return None
    if rule.better == "equal":
        return "regression" if abs(b - a) > rule.abs else None
    scaled = a >= 0  # ratios only make sense for non-negative values
    low = min(a / rule.rel, a - rule.abs) if scaled else a - rule.abs
    high = max(a * rule.rel, a + rule.abs) if scaled else a + rule.abs
    if rule.better == "lower":
        return "regression" if b > high else "improvement" if b < low else None
    return "regression" if b < low else "improvement" if b > high else None


def compare_record(current: Record, base: Record, baseline: str = "") -> list[Finding]:
    """Findings for one record against its baseline record."""
    found: list[Finding] = []
    old_rank, new_rank = ids.rank(base.status), ids.rank(current.status)
    if old_rank is not None and new_rank is not None and old_rank != new_rank:
        kind = "regression" if new_rank < old_rank else "improvement"
        found.append(Finding(kind, current.id, None, base.status, current.status,
                             baseline=baseline, test=current.test))
    rules = {**base.rules, **current.rules}  # the current check's rules win
    for metric, rule in sorted(rules.items()):
        if metric not in current.metrics or metric not in base.metrics:
            continue
        verdict = judge(base.metrics[metric], current.metrics[metric], rule,
                        base.metrics.get(f"{metric}.spread"),
                        current.metrics.get(f"{metric}.spread"))
        if verdict == "regression":
            verdict = rule.alerts_as  # Note [Review or regression]
        if verdict:
            found.append(Finding(verdict, current.id, metric, base.metrics[metric],
                                 current.metrics[metric], rule.to_json(), baseline, current.test))
    return found


def compare(current: RunResults, baseline: RunResults, baseline_name: str = "",
            ran_ids: Optional[Iterable[str]] = None,
            op_filter: Optional[str] = None) -> list[Finding]:
    """All findings of a run: per-record changes, then ``new``, ``lost`` and ``not-run``."""
    found: list[Finding] = []
    for record_id, rec in sorted(current.records.items()):
        base = baseline.records.get(record_id)
        if base is not None:
            found.extend(compare_record(rec, base, baseline_name))
    return found + presence(current, baseline, baseline_name, ran_ids, op_filter)


def presence(current: RunResults, baseline: RunResults, baseline_name: str = "",
             ran_ids: Optional[Iterable[str]] = None,
             op_filter: Optional[str] = None) -> list[Finding]:
    """Records only in the run (``new``) or only in the baseline: ``lost`` when their check
    ran (``ran_ids``: the node ids that ran; default: the tests that wrote records) and
    did not deselect them (``op_filter``), else ``not-run`` (Note [Review or regression])."""
    found = [Finding("new", record_id, baseline=baseline_name, test=rec.test)
             for record_id, rec in sorted(current.records.items())
             if record_id not in baseline.records]
    ran = set(ran_ids) if ran_ids is not None else \
        {rec.test for rec in current.records.values() if rec.test}
    for record_id, base in sorted(baseline.records.items()):
        if record_id in current.records:
            continue
        lost = (base.status != ids.Status.SKIP and base.test in ran
                and not ids.filtered_out(record_id, op_filter))
        found.append(Finding("lost" if lost else "not-run", record_id, baseline=baseline_name,
                             test=base.test))
    return found


def failure_message(findings: list[Finding], reproduce: str = "") -> str:
    """The text a regression puts into the failing test's report."""
    shown = [f for f in findings if f.kind in ("regression", "review")]
    lines = ["regression against the stored baseline:" if any(
        f.kind == "regression" for f in shown) else
        "moved beyond the stored baseline's rule (failing because of --fail-on review):"]
    lines += [f"  {f.message}" for f in shown]
    if reproduce:
        lines.append(f"  reproduce: {reproduce}")
    lines.append("  (if the change is intended, re-record: --baseline record)")
    return "\n".join(lines)


def write_alerts(path: Union[str, Path], run_verdict, context: dict) -> list[Path]:
    """Write the verdict (:class:`harness.verdict.RunVerdict`) and its findings as JSON and
    Markdown (``x.json`` + ``x.md``); nothing here decides anything."""
    path = Path(path)
    json_path, md_path = (path.with_suffix(".json"), path) if path.suffix == ".md" else \
        (path, path.with_suffix(".md"))
    of = {kind: run_verdict.of_kind(kind) for kind in ("regression", "review", "improvement")}
    lost = [f.record_id for f in run_verdict.of_kind("lost")]
    not_run = [f.record_id for f in run_verdict.of_kind("not-run")]
    doc = {**context, **run_verdict.to_json(),
           "regressions": [f.to_json() for f in of["regression"]],
           "reviews": [f.to_json() for f in of["review"]],
           "improvements": [f.to_json() for f in of["improvement"]],
           "new": len(run_verdict.of_kind("new")), "lost_records": lost, "not_run": not_run}
    atomic_write_text(json_path, json.dumps(doc, indent=1) + "\n")
    lines = [f"# Conformance run: {run_verdict.level}", "", run_verdict.line, ""]
    lines += [f"**{note}**" for note in run_verdict.notes]
    for key in ("device", "stack_id", "baseline"):
        if context.get(key):
            lines.append(f"- {key}: `{context[key]}`")
    if run_verdict.failing:
        lines += ["", f"## Failing checks ({len(run_verdict.failing)})", ""]
        still = set(run_verdict.still_failing)
        lines += [f"- `{rid}`" + (" (failed in the baseline too)" if rid in still else "")
                  for rid in run_verdict.failing]
    if run_verdict.lost:
        lines += ["", f"## Lost capabilities and records ({len(run_verdict.lost)})", ""]
        lines += [f"- {line}" for line in run_verdict.lost]
    if run_verdict.known_failures:
        lines += ["", f"## Known failures ({len(run_verdict.known_failures)})", ""]
        lines += [f"- `{rid}`" for rid in run_verdict.known_failures]
    for kind, title in (("regression", "Regressions"), ("review", "Moved beyond their rule "
                                                                  "(review)"),
                        ("improvement", "Improvements")):
        lines += ["", f"## {title} ({len(of[kind])})", ""]
        lines += [f"- `{f.record_id}` {_md(f)}" for f in of[kind]] or ["none"]
    if run_verdict.detectable:
        lines += ["", "## Benchmarks: the smallest slow-down each can detect", ""]
        lines += detectable_md(run_verdict.detectable)
    lines += ["", f"New records: {doc['new']}; lost records: {len(lost)}; not run (not "
                  f"selected): {len(not_run)}", ""]
    atomic_write_text(md_path, "\n".join(lines))
    return [json_path, md_path]


DETECTABLE_COLUMNS = ("benchmark", "verdict", "MDE", "baseline spread", "runs",
                      "what it can detect")


def detectable_cells(row: dict) -> list[str]:
    """One benchmark's row of :data:`DETECTABLE_COLUMNS` (Note [Minimum detectable effect]
    in :mod:`harness.bench.stats`), as text."""
    mde, spread = row.get("mde"), row.get("spread")
    return [str(row.get("record_id")), str(row.get("verdict") or ""),
            "none" if mde is None else f"{mde:.1%}",
            "" if spread is None else f"{spread:.1%}",
            f"{row.get('compare_runs')} vs {row.get('baseline_runs')}", str(row.get("text", ""))]


def detectable_md(rows: list[dict]) -> list[str]:
    """The Markdown table of what each benchmark's baseline can detect."""
    out = ["| " + " | ".join(DETECTABLE_COLUMNS) + " |", "|---|---|---:|---:|---|---|"]
    for row in rows:
        cells = detectable_cells(row)
        out.append(f"| `{cells[0]}` | " + " | ".join(cells[1:]) + " |")
    return out


def _md(f: Finding) -> str:
    if f.metric is None:
        return f"status {f.old} -> {f.new}"
    return f"{f.metric}: {_fmt(f.old)} -> {_fmt(f.new)}"
