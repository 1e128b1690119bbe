"""The judgement: one run's stored results (and its baseline) in, findings and the verdict out.

:func:`judge` is the only place a run's verdict is decided. The session's end (the
terminal ``VERDICT`` line and the exit code), the alerts, the report,
``python -m harness report``, ``baseline diff`` and ``history`` all call it on stored
values (:class:`harness.results.RunResults`), so every view of one run says the same;
:func:`check_failures` is its per-check share (what fails one test, ``--fail-on``).
It reads nothing but its arguments and writes nothing.

Note [One verdict]
~~~~~~~~~~~~~~~~~~
The verdict is what a person decides an upgrade (or a nightly) from, so it may never say
GO about a red run:

* ``NO-GO`` when any check fails or errors (a record with a failing status, Note [One
  status type] in :mod:`harness.ids`, or a failed test, whether or not its baseline failed
  too: a still-failing check is listed as such), on a harness error (an unusable baseline,
  an unwritable path, a duplicate record id), when the session did not complete, on a
  *regression* finding (Note [Review or regression] in :mod:`harness.regress`: a lost
  capability, a lost record, a metric whose rule says the change is a loss), and when the
  run checked nothing (Note [Nothing checked]);
* ``REVIEW`` when every check passes but metrics moved beyond their baseline rule
  (*review* findings);
* ``GO`` otherwise. A run compared with nothing is GO only on its own checks, and
  says ``NOT COMPARED`` beside the verdict; ``--baseline require`` makes that a NO-GO.

A failing record of a listed known failure (``info["known_failure"]``, a strict xfail
of :mod:`harness.known_failures`) neither fails the run nor counts as a lost capability:
the known-failures table is where a person already decided about it. The same test's
records that pass are no known failures: they are not listed as such, and their changes
are findings like any other record's.

The pytest exit code agrees with it: NO-GO exits non-zero, REVIEW exits 0 unless
``--fail-on review``.

Note [Nothing checked]
~~~~~~~~~~~~~~~~~~~~~~
A run whose every record is ``skip`` (every case filtered out, every input empty, every
check opted out) has measured nothing about the stack. GO would read as "nothing got
worse"; it is NO-GO with ``NOTHING CHECKED`` as its first reason, so the exit code is
non-zero and the reason says what to change.

Note [Honest comparisons]
~~~~~~~~~~~~~~~~~~~~~~~~~
A baseline is evidence only when its run measured the stack: a fault-injected or
incomplete baseline is not compared against (the verdict says ``NOT COMPARED`` and why).
A comparison whose two runs differ in seed, selection (markers, ``-k``, ``--op-filter``)
or device type is made, and :func:`comparability` says how they differ in the verdict's
``notes``, which the session header, the terminal summary, the alerts and the report
print. A run with injected faults is judged on what its checks found, and its notes say
``FAULTS INJECTED``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Iterable, Optional

from harness.ids import FAILING, LOST, Status

if TYPE_CHECKING:  # pragma: no cover
    from harness.regress import Finding
    from harness.results import Record, RunResults

NO_GO, REVIEW, GO = "NO-GO", "REVIEW", "GO"
LEVELS = (NO_GO, REVIEW, GO)
FAILING_STATUSES = tuple(s.value for s in FAILING)
NOTHING_CHECKED = "NOTHING CHECKED"
FINDING_KINDS = ("regression", "review", "improvement", "new", "lost", "not-run")
"""``lost``: a baseline record whose check ran but did not record it (a regression);
``not-run``: a baseline record whose check was not selected (listed, never judged)."""


@dataclasses.dataclass
class RunVerdict:
    """The run's verdict, why, and every finding it was decided from.

    Attributes:
        level: ``NO-GO``, ``REVIEW`` or ``GO``.
        reasons: one line per cause, most severe first (empty for GO).
        failing: record ids (or test node ids) that fail or error in this run.
        still_failing: of ``failing``, those that failed in the baseline too.
        compared: whether a baseline was compared at all.
        not_compared: why not, when ``compared`` is False.
        counts: records, failing, failed tests and findings per kind.
        errors: the harness errors (each one makes the run NO-GO).
        findings: every :class:`harness.regress.Finding` against the baseline.
        lost: one line per lost capability or lost record (the regressions of status and
            presence), ``record id: pass -> unsupported (reason)``.
        known_failures: ids of the failing records of listed known failures (not counted
            as failing).
        notes: how the compared runs differ (seed, selection, device type, faults).
        nothing_checked: the run measured nothing (Note [Nothing checked]).
        detectable: per benchmark record, what its baseline can detect (Note [Minimum
            detectable effect] in :mod:`harness.bench.stats`), as the record stored it.
    """

    level: str
    reasons: list[str]
    failing: list[str]
    still_failing: list[str]
    compared: bool
    not_compared: str = ""
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    errors: list[str] = dataclasses.field(default_factory=list)
    findings: list = dataclasses.field(default_factory=list)
    lost: list[str] = dataclasses.field(default_factory=list)
    known_failures: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    nothing_checked: bool = False
    detectable: list[dict] = dataclasses.field(default_factory=list)

    @property
    def headline(self) -> str:
        """``VERDICT: NO-GO (3 failing check(s); 1 regression(s))``: one line to act on."""
        why = "; ".join(self.reasons[:3]) + (" ..." if len(self.reasons) > 3 else "")
        return f"VERDICT: {self.level}" + (f" ({why})" if why else "")

    @property
    def line(self) -> str:
        """The headline, plus ``NOT COMPARED: why`` when nothing was compared."""
        return self.headline + ("" if self.compared else f" | NOT COMPARED: {self.not_compared}")

    def of_kind(self, kind: str) -> list:
        return [f for f in self.findings if f.kind == kind]

    def exit_failed(self, fail_on: str = "no-go") -> bool:
        """Whether the run's exit code must be non-zero (``fail_on``: no-go or review)."""
        return self.level == NO_GO or (fail_on == "review" and self.level == REVIEW)

    def to_json(self) -> dict:
        return {"verdict": self.level.lower(), "reasons": self.reasons,
                "failing": self.failing, "still_failing": self.still_failing,
                "compared": self.compared, "not_compared": self.not_compared or None,
                "counts": self.counts, "errors": self.errors, "lost": self.lost,
                "known_failures": self.known_failures, "notes": self.notes,
                "nothing_checked": self.nothing_checked, "detectable": self.detectable}


# ----------------------------------------------------------------------- per check

def check_failures(records: Iterable[Record], baseline: Optional[RunResults],
                   baseline_name: str = "", fail_on: str = "no-go"
                   ) -> tuple[list[Finding], list[Finding]]:
    """One check's share of the judgement: its records' findings against the baseline,
    and those that fail the check (regressions; reviews too with ``fail_on="review"``)."""
    from harness import regress

    if baseline is None or not usable_baseline(baseline)[0]:
        return [], []
    findings: list[Finding] = []
    for rec in records:
        base = baseline.records.get(rec.id)
        if base is not None:
            findings.extend(regress.compare_record(rec, base, baseline_name))
    failing_kinds = ("regression", "review") if fail_on == "review" else ("regression",)
    return findings, [f for f in findings if f.kind in failing_kinds]


# --------------------------------------------------------------------------- a run

def honest(run: RunResults, what: str = "the baseline run") -> tuple[bool, str]:
    """Whether a stored run measured the stack, so it may be a baseline or history
    (Note [Honest comparisons]); else False and why."""
    if run.faults:
        return False, (f"{what} was fault-injected ({', '.join(run.faults)}); "
                       "re-record it without faults")
    if not run.complete:
        return False, f"{what} did not complete; re-record it"
    return True, ""


usable_baseline = honest


def comparability(run: RunResults, baseline: Optional[RunResults]) -> list[str]:
    """How ``run`` and ``baseline`` differ in what they measured (Note [Honest
    comparisons]); also ``FAULTS INJECTED`` for a run with faults."""
    notes: list[str] = []
    if run.faults:
        notes.append(f"FAULTS INJECTED: {', '.join(run.faults)} (this run measures the "
                     "faults, not the stack; it never becomes a baseline or history)")
    if baseline is None:
        return notes
    if run.seed != baseline.seed:
        notes.append(f"different seeds: this run {run.seed}, the baseline {baseline.seed} "
                     "(inputs differ; rerun with the baseline's --seed to compare like with "
                     "like)")
    a, b = run.fingerprint.get("device_type"), baseline.fingerprint.get("device_type")
    if a != b:
        notes.append(f"different device types: this run {a}, the baseline {b}")
    if run.selection is not None and baseline.selection is not None \
            and _selection_text(run) != _selection_text(baseline):  # None: unknown
        notes.append(f"different selections: this run {_selection_text(run)}, the baseline "
                     f"{_selection_text(baseline)} (records of checks not selected are "
                     "listed as not run)")
    return notes


def _selection_text(run: RunResults) -> str:
    sel = run.selection or {}
    parts = [f"{flag} {sel[key]!r}" for key, flag in (("markexpr", "-m"), ("keyword", "-k"),
                                                       ("op_filter", "--op-filter"))
             if sel.get(key)]
    parts += [flag for key, flag in (("run_slow", "--run-slow"),
                                      ("run_benchmarks", "--run-benchmarks")) if sel.get(key)]
    if sel.get("args"):
        parts.append(" ".join(sel["args"]))
    return " ".join(parts) or "(everything)"


def _ran_tests(run: RunResults) -> set[str]:
    return set(run.outcomes) | {rec.test for rec in run.records.values() if rec.test}


KNOWN_STATUS = "xfail"
"""How counts per suite name a known failure's failing records (pytest's word for them)."""


def status_counts(run: RunResults) -> dict[str, dict[str, int]]:
    """Records per suite and status, sorted by suite; a known failure's failing records
    count as :data:`KNOWN_STATUS`, not as failing (every view's counts come from here)."""
    counts: dict[str, dict[str, int]] = {}
    for rec in run.records.values():
        row = counts.setdefault(rec.suite, {})
        status = KNOWN_STATUS if _known(rec) else str(rec.status)
        row[status] = row.get(status, 0) + 1
    return dict(sorted(counts.items()))


def _known(rec: Record) -> bool:
    """A failing record of a listed known failure; the test's other records, which pass,
    are judged as any other (a pass is no known failure, and its changes are findings)."""
    return rec.status in FAILING and bool(rec.info.get("known_failure"))


def judge(run: RunResults, baseline: Optional[RunResults] = None, *, baseline_name: str = "",
          not_compared: str = "", errors: Iterable[str] = ()) -> RunVerdict:
    """The verdict of one stored run against its baseline (Note [One verdict]).

    Args:
        run: the run's results (records, outcomes, completeness, faults, seed, selection,
            known-failure tags, harness errors).
        baseline: the baseline's results, or None (not compared).
        baseline_name: the baseline's stack id (named in the findings).
        not_compared: why there is no baseline (shown beside the verdict).
        errors: harness errors besides ``run.errors`` (e.g. found while writing files).
    """
    from harness import regress

    errors = list(dict.fromkeys([*run.errors, *errors]))
    if baseline is not None:
        ok, why = usable_baseline(baseline)
        if not ok:
            baseline, not_compared = None, why
    notes = comparability(run, baseline)
    findings: list[Finding] = []
    known = sorted(rid for rid, rec in run.records.items() if _known(rec))
    if baseline is not None:
        findings = regress.compare(run, baseline, baseline_name, ran_ids=_ran_tests(run),
                                   op_filter=(run.selection or {}).get("op_filter"))
        # a listed known failure is decided in the known-failures table, not here
        findings = [f for f in findings if not (f.metric is None and f.record_id in known)]
    kinds: dict[str, int] = {}
    for finding in findings:
        kinds[finding.kind] = kinds.get(finding.kind, 0) + 1
    failing = sorted(rid for rid, rec in run.records.items()
                     if rec.status in FAILING and not _known(rec))
    base_status = {rid: rec.status for rid, rec in baseline.records.items()} if baseline else {}
    still = [rid for rid in failing if base_status.get(rid) in FAILING]
    failed_tests = sorted(node for node, outcome in run.outcomes.items() if outcome == "failed")
    def lost_capability(f: Finding) -> bool:  # pass -> slower is a regression, not one
        return f.kind == "regression" and f.metric is None and f.new in LOST

    capability = [f for f in findings if lost_capability(f)]
    lost = [_lost_line(f, run) for f in findings if f.kind == "lost" or lost_capability(f)]
    checked = [rid for rid, rec in run.records.items() if rec.status != Status.SKIP]
    nothing = bool(run.records or run.outcomes) and not checked and not failed_tests
    reasons: list[str] = []
    if nothing:
        reasons.append(f"{NOTHING_CHECKED}: all {len(run.records)} record(s) skipped"
                       + _skip_hint(run))
    if not run.complete:
        reasons.append("the session did not complete")
    if errors:
        first = errors[0] if len(errors[0]) <= 90 else errors[0][:87] + "..."
        reasons.append(f"{len(errors)} error(s): {first}")
    if failing:
        new = len(failing) - len(still)
        text = f"{len(failing)} failing check(s)"
        if still:
            text += f" ({len(still)} failed in the baseline too, {new} newly)"
        reasons.append(text)
    elif failed_tests:
        reasons.append(f"{len(failed_tests)} failed test(s)")
    if capability:
        reasons.append(f"{len(capability)} capability(ies) lost")
    if kinds.get("lost"):
        reasons.append(f"{kinds['lost']} record(s) lost (their checks ran and did not record "
                       "them)")
    metric_regressions = kinds.get("regression", 0) - len(capability)
    if metric_regressions:
        reasons.append(f"{metric_regressions} regression(s)")
    if reasons:
        level = NO_GO
    elif kinds.get("review"):
        level = REVIEW
        reasons.append(f"{kinds['review']} metric(s) moved beyond their baseline rule; "
                       "every check passes")
    else:
        level = GO
    counts = {"records": len(run.records), "failing": len(failing),
              "failed_tests": len(failed_tests), "known_failures": len(known), **kinds}
    return RunVerdict(level, reasons, failing or failed_tests, still, baseline is not None,
                      "" if baseline is not None else (not_compared or "no baseline"), counts,
                      errors, findings, lost, known, notes, nothing, _detectable(run))


def _detectable(run: RunResults) -> list[dict]:
    """What each benchmark's baseline can detect, as its record stored it (``info["mde"]``)."""
    return [{"record_id": rid, "verdict": rec.info.get("bench_verdict"), **rec.info["mde"]}
            for rid, rec in sorted(run.records.items()) if isinstance(rec.info.get("mde"), dict)]


def _lost_line(finding: Finding, run: RunResults) -> str:
    if finding.kind == "lost":
        return f"{finding.record_id}: recorded in the baseline, not by {finding.test or 'its check'}"
    rec = run.records.get(finding.record_id)
    why = rec.headline if rec is not None else ""
    return f"{finding.record_id}: {finding.old} -> {finding.new}" + (f" ({why})" if why else "")


def _skip_hint(run: RunResults) -> str:
    first = next((rec.message for rec in run.records.values() if rec.message), "")
    first = first.strip().splitlines()[0] if first else ""
    return f", e.g. {first[:120]}" if first else ""
