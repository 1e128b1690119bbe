"""One check's end, as plain values: what its records mean for its report.

:func:`conclude_check` takes what a test recorded, the exception it raised (or None)
and pytest's outcome, and returns a :class:`CheckEnd`: the records (an ``unsupported``
or automatic one added), the findings against the baseline, and what the plugin must do
to the test's report (skip it, fail it with a text). :func:`collect` is the other end:
the process that writes results adds a report's records and findings to the run. The
plugin's hooks only move these values in and out of pytest's objects.

Note [Records travel with reports]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A test's records are compared with the baseline where the test ran (so a regression
fails *that* test), then attached to its report as a ``user_properties`` entry
(:meth:`CheckEnd.payload`). The process that writes results (the only one without
``workerinput``: the xdist controller, or the single process) collects them in
``pytest_runtest_logreport`` (:func:`collect`); xdist serialises ``user_properties``, so
records reach the controller unchanged.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Iterable, Optional

from harness import regress
from harness.device import Unsupported, missing_kernel
from harness.recorder import FAILING, auto_record_id, reproduce_of
from harness.results import Record
from harness.session import RunState


@dataclasses.dataclass
class CheckEnd:
    """What one test's end means for its report.

    ``skip``: mark the report skipped with this text (an unsupported feature).
    ``failures``: texts that fail the report, in order; on a report already failed (or
    skipped) each becomes a section of it instead.
    """

    records: list[Record]
    findings: list[regress.Finding]
    skip: Optional[str] = None
    failures: list[str] = dataclasses.field(default_factory=list)

    def payload(self) -> str:
        """The ``user_properties`` value (Note [Records travel with reports])."""
        return json.dumps({"records": {r.id: r.to_json() for r in self.records},
                           "findings": [f.to_json() for f in self.findings]})


def status_of(outcome: str, when: str, wasxfail: Optional[str]) -> str:
    """A test's record status from pytest's outcome of one phase (an xfail counts as fail)."""
    if outcome == "passed":
        return "pass"
    if outcome == "skipped":
        return "fail" if wasxfail is not None else "skip"
    return "fail" if when == "call" else "error"


def unsupported_reason(error: Optional[BaseException]) -> Optional[str]:
    """Why a check's exception means "this stack lacks it" (None: it does not)."""
    if error is None or not missing_kernel(error):
        return None
    if isinstance(error, Unsupported):
        return str(error)
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def conclude_check(nodeid: str, records: Iterable[Record], error: Optional[BaseException],
                   *, outcome: str, when: str, wasxfail: Optional[str],
                   state: RunState) -> CheckEnd:
    """Judge one test's phase: its records (plus an ``unsupported`` or automatic record),
    known-failure tagging, and the comparison with the selected baseline.

    Args:
        nodeid: the test's node id.
        records: what the test recorded (the ``results`` fixture's records).
        error: the exception the phase raised, or None.
        outcome: pytest's outcome of the phase (``passed``, ``failed``, ``skipped``).
        when: the phase (``setup`` or ``call``).
        wasxfail: the xfail reason when pytest treated the test as xfail, else None.
        state: the session (settings, device, baseline selection).
    """
    records = list(records)
    end = CheckEnd(records, [])
    reason = unsupported_reason(error)
    if reason is not None:  # Note [Missing features of older stacks] in harness.device
        if not any(r.status in FAILING for r in records):
            end.skip = f"unsupported: {reason}"
        records.append(Record(id=auto_record_id(nodeid), status="unsupported", test=nodeid,
                              message=reason, info={"reason": reason}))
    if not records:
        records.append(Record(id=auto_record_id(nodeid), test=nodeid,
                              status=status_of(outcome, when, wasxfail)))
    if wasxfail:  # a known failure (harness.known_failures)
        for rec in records:
            rec.info.setdefault("known_failure", wasxfail)
    failing = [r for r in records if r.status in FAILING]
    if failing and outcome == "passed" and end.skip is None:
        end.failures.append("\n".join(f"{r.id}: {r.message or r.status}" for r in failing))
    end.findings = compare_with_baseline(records, state)
    failing_kinds = ("regression", "review") if state.settings.fail_on == "review" else \
        ("regression",)  # Note [Review or regression]
    regressions = [f for f in end.findings if f.kind in failing_kinds]
    if regressions:
        reproduce = reproduce_of(nodeid, state.device.type, state.settings)
        end.failures.append(regress.failure_message(regressions, reproduce))
    return end


def compare_with_baseline(records: Iterable[Record], state: RunState) -> list[regress.Finding]:
    """Findings of each record against the same record of the selected baseline."""
    selection = state.selection
    if selection is None or selection.results is None:
        return []
    findings: list[regress.Finding] = []
    for rec in records:
        base = selection.results.records.get(rec.id)
        if base is not None:
            findings.extend(regress.compare_record(rec, base, selection.stack_id or ""))
    return findings


def collect(state: RunState, nodeid: str, when: str, outcome: str,
            payloads: Iterable[str]) -> None:
    """Add one report to the run: the test's outcome (the call phase's, or the first
    phase that did not pass) and the records and findings of its payloads."""
    if when == "call" or outcome != "passed":
        if when == "call" or nodeid not in state.run.outcomes:
            state.run.outcomes[nodeid] = outcome
    for value in payloads:
        payload = json.loads(value)
        for record_id, data in payload["records"].items():
            state.run.add(Record.from_json(record_id, data))
        state.findings.extend(regress.Finding.from_json(f) for f in payload["findings"])
