"""Current results vs a baseline -> findings (regression, review, improvement, new, missing).

Note [Review or regression]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
A status that loses capability (pass -> fail/error/unsupported/fallback) is always a
*regression*. A metric that moves beyond its rule is what its rule's ``severity`` says
(:attr:`harness.results.Rule.alerts_as`): a *regression* where the change itself is the
loss (a benchmark slower beyond noise, a lower max batch, another state dtype), else a
*review*: the check still passes its own standard, but its numbers moved more than the
baseline allows, so a person should look before accepting the stack. A regression fails
the check that produced it and makes the run NO-GO; a review makes it REVIEW and fails
the check only with ``--fail-on review`` (the fault check runs so, since drift faults are
caught through the baseline).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from harness.results import NON_FINITE, Record, Rule, RunResults, atomic_write_text

# A status change that loses capability or correctness is a regression.
_STATUS_RANK = {"pass": 3, "skip": None, "fallback": 2, "unsupported": 1, "fail": 0, "error": 0}


@dataclasses.dataclass(frozen=True)
class Finding:
    """One difference between a run and its baseline."""

    kind: str  # regression | review | improvement | new | missing
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
        if self.kind in ("new", "missing"):
            return f"{self.kind}: {self.record_id}{where}"
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
    old_rank, new_rank = _STATUS_RANK.get(base.status), _STATUS_RANK.get(current.status)
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
            ran_ids: Optional[Iterable[str]] = None) -> list[Finding]:
    """All findings of a run: per-record changes, then ``new`` and ``missing``."""
    found: list[Finding] = []
    for record_id, rec in sorted(current.records.items()):
        base = baseline.records.get(record_id)
        if base is not None:
            found.extend(compare_record(rec, base, baseline_name))
    return found + presence(current, baseline, baseline_name, ran_ids)


def presence(current: RunResults, baseline: RunResults, baseline_name: str = "",
             ran_ids: Optional[Iterable[str]] = None) -> list[Finding]:
    """Records only in the run (``new``) or only in the baseline (``missing``).

    ``missing`` only for baseline records whose test ran (``ran_ids``), or, without
    ``ran_ids``, whose suite produced records in this run.
    """
    found = [Finding("new", record_id, baseline=baseline_name, test=rec.test)
             for record_id, rec in sorted(current.records.items())
             if record_id not in baseline.records]
    suites = {rec.suite for rec in current.records.values()} if ran_ids is None else None
    ran = set(ran_ids) if ran_ids is not None else None
    for record_id, base in sorted(baseline.records.items()):
        if record_id in current.records:
            continue
        if (ran is not None and base.test in ran) or (suites is not None and base.suite in suites):
            found.append(Finding("missing", record_id, baseline=baseline_name, test=base.test))
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


def write_alerts(path: Union[str, Path], findings: list[Finding], context: dict,
                 run_verdict=None) -> list[Path]:
    """Write the verdict and the findings as JSON and Markdown (``x.json`` + ``x.md``).

    ``run_verdict`` is the run's :class:`harness.verdict.RunVerdict`; without one (a diff of
    two stored files) it is decided from the findings alone.
    """
    from harness import verdict as verdict_mod

    path = Path(path)
    json_path, md_path = (path.with_suffix(".json"), path) if path.suffix == ".md" else \
        (path, path.with_suffix(".md"))
    if run_verdict is None:
        run_verdict = verdict_mod.decide({}, findings)
    of = {kind: [f for f in findings if f.kind == kind]
          for kind in ("regression", "review", "improvement")}
    doc = {**context, **run_verdict.to_json(),
           "regressions": [f.to_json() for f in of["regression"]],
           "reviews": [f.to_json() for f in of["review"]],
           "improvements": [f.to_json() for f in of["improvement"]],
           "new": sum(f.kind == "new" for f in findings),
           "missing": sum(f.kind == "missing" for f in findings)}
    atomic_write_text(json_path, json.dumps(doc, indent=1) + "\n")
    lines = [f"# Conformance run: {run_verdict.level}", "", run_verdict.line, ""]
    for key in ("device", "stack_id", "baseline"):
        if context.get(key):
            lines.append(f"- {key}: `{context[key]}`")
    if run_verdict.failing:
        lines += ["", f"## Failing checks ({len(run_verdict.failing)})", ""]
        still = set(run_verdict.still_failing)
        lines += [f"- `{rid}`" + (" (failed in the baseline too)" if rid in still else "")
                  for rid in run_verdict.failing]
    for kind, title in (("regression", "Regressions"), ("review", "Moved beyond their rule "
                                                                  "(review)"),
                        ("improvement", "Improvements")):
        lines += ["", f"## {title} ({len(of[kind])})", ""]
        lines += [f"- `{f.record_id}` {_md(f)}" for f in of[kind]] or ["none"]
    lines += ["", f"New records: {doc['new']}; missing records: {doc['missing']}", ""]
    atomic_write_text(md_path, "\n".join(lines))
    return [json_path, md_path]


def _md(f: Finding) -> str:
    if f.metric is None:
        return f"status {f.old} -> {f.new}"
    return f"{f.metric}: {_fmt(f.old)} -> {_fmt(f.new)}"
