"""One verdict per run: ``NO-GO``, ``REVIEW`` or ``GO``, counting everything.

Note [One verdict]
~~~~~~~~~~~~~~~~~~
The verdict is what a person decides an upgrade (or a nightly) from, so it may never say
GO about a red run:

* ``NO-GO`` when any check fails or errors (a record with status ``fail``/``error`` or a
  failed test, whether or not its baseline failed too: a still-failing check is listed
  as such), when the baseline is unusable (corrupt, foreign, or required but absent),
  when the session did not complete, or on a *regression* finding (Note [Review or
  regression] in :mod:`harness.regress`);
* ``REVIEW`` when every check passes but metrics moved beyond their baseline rule
  (*review* findings);
* ``GO`` otherwise. A run compared with nothing is GO only on its own checks, and
  says ``NOT COMPARED`` beside the verdict; ``--baseline require`` makes that a NO-GO.

The pytest exit code agrees with it: NO-GO exits non-zero, REVIEW exits 0 unless
``--fail-on review``.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Optional

NO_GO, REVIEW, GO = "NO-GO", "REVIEW", "GO"
LEVELS = (NO_GO, REVIEW, GO)
FAILING_STATUSES = ("fail", "error")


@dataclasses.dataclass
class RunVerdict:
    """The run's verdict and why.

    Attributes:
        level: ``NO-GO``, ``REVIEW`` or ``GO``.
        reasons: one line per cause, most severe first (empty for GO).
        failing: record ids (or test node ids) that fail or error in this run.
        still_failing: of ``failing``, those that failed in the baseline too.
        compared: whether a baseline was compared at all.
        not_compared: why not, when ``compared`` is False.
    """

    level: str
    reasons: list[str]
    failing: list[str]
    still_failing: list[str]
    compared: bool
    not_compared: str = ""
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    errors: list[str] = dataclasses.field(default_factory=list)

    @property
    def headline(self) -> str:
        """``VERDICT: NO-GO (3 failing check(s); 1 regression(s))``: one line to act on."""
        why = "; ".join(self.reasons[:3]) + (" ..." if len(self.reasons) > 3 else "")
        return f"VERDICT: {self.level}" + (f" ({why})" if why else "")

    @property
    def line(self) -> str:
        """The headline, plus ``NOT COMPARED: why`` when nothing was compared."""
        return self.headline + ("" if self.compared else f" | NOT COMPARED: {self.not_compared}")

    def exit_failed(self, fail_on: str = "no-go") -> bool:
        """Whether the run's exit code must be non-zero (``fail_on``: no-go or review)."""
        return self.level == NO_GO or (fail_on == "review" and self.level == REVIEW)

    def to_json(self) -> dict:
        return {"verdict": self.level.lower(), "reasons": self.reasons,
                "failing": self.failing, "still_failing": self.still_failing,
                "compared": self.compared, "not_compared": self.not_compared or None,
                "counts": self.counts, "errors": self.errors}


def decide(statuses: dict[str, str], findings: Iterable, *,
           failed_tests: Iterable[str] = (), baseline_statuses: Optional[dict] = None,
           errors: Iterable[str] = (), compared: bool = True, not_compared: str = "",
           complete: bool = True) -> RunVerdict:
    """The verdict of one run (Note [One verdict]).

    Args:
        statuses: record id -> status of this run.
        findings: :class:`harness.regress.Finding` objects (or dicts with ``kind``).
        failed_tests: node ids of tests that failed or errored (a test can fail without a
            failing record, e.g. an assertion in a fixture).
        baseline_statuses: record id -> status in the baseline, to tell still-failing
            checks from newly failing ones.
        errors: unusable-baseline and other harness errors; each one makes the run NO-GO.
        compared: whether a baseline was compared.
        not_compared: why not (shown beside the verdict).
        complete: False when the session was interrupted or crashed.
    """
    kinds: dict[str, int] = {}
    for finding in findings:
        kind = finding["kind"] if isinstance(finding, dict) else finding.kind
        kinds[kind] = kinds.get(kind, 0) + 1
    failing = sorted(rid for rid, status in statuses.items() if status in FAILING_STATUSES)
    base = baseline_statuses or {}
    still = [rid for rid in failing if base.get(rid) in FAILING_STATUSES]
    failed_tests = sorted(set(failed_tests))
    reasons: list[str] = []
    errors = list(errors)
    if not complete:
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
    if kinds.get("regression"):
        reasons.append(f"{kinds['regression']} regression(s)")
    if reasons:
        level = NO_GO
    elif kinds.get("review"):
        level = REVIEW
        reasons.append(f"{kinds['review']} metric(s) moved beyond their baseline rule; "
                       "every check passes")
    else:
        level = GO
    counts = {"records": len(statuses), "failing": len(failing),
              "failed_tests": len(failed_tests), **kinds}
    return RunVerdict(level, reasons, failing or failed_tests, still, compared,
                      "" if compared else (not_compared or "no baseline"), counts, errors)
