"""One check's end, as plain values: what its records mean for its report.

:func:`conclude_check` takes what a test recorded, the exception it raised (or None)
and pytest's outcome, and returns a :class:`CheckEnd`: the records (the ids it did not
reach marked with its status, Note [Same ids whatever the outcome]), the findings against
the baseline, and what the plugin must do
to the test's report (skip it, fail it with a text). :func:`collect` is the other end:
the process that writes results adds a report's records to the run. The
plugin's hooks only move these values in and out of pytest's objects.

Note [Records travel with reports]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A test's records are compared with the baseline where the test ran (so a regression
fails *that* test), then attached to its report as a ``user_properties`` entry
(:meth:`CheckEnd.payload`). The process that writes results (the only one without
``workerinput``: the xdist controller, or the single process) collects them in
``pytest_runtest_logreport`` (:func:`collect`); xdist serialises ``user_properties``, so
records reach the controller unchanged. In a single process (no xdist worker) nothing is
serialised: the entry is a :class:`LocalPayload`, which carries the record objects
themselves (their JSON round trip was 3% of the op catalog's time under cProfile, for
records that never left the process) and, as text, only a note of how many there are
(for whatever writes ``user_properties`` as text; the run's results file has them all).

Note [Same ids whatever the outcome]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A check that stops before it records (its feature is missing: ``unsupported``; it
errors; it fails; it is skipped) records under the ids its baseline holds for this
test node, each with that status and the reason, so ``pass -> unsupported`` is a
status regression of each record the baseline knows, named one by one, and not "10
new, 10 missing". Only a test the baseline does not know (or a run without one) gets
the automatic id (:func:`harness.ids.auto_record`). Ids the test did record are left
as recorded; baseline ids a *passing* test did not record are lost coverage
(Note [Review or regression] in :mod:`harness.regress`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Iterable, Optional

from harness import regress, verdict
from harness.device import Unsupported, missing_kernel
from harness.ids import FAILING, Status, auto_record
from harness.recorder import reproduce_of
from harness.results import DuplicateRecord, Record
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

    def payload(self, local: bool = False) -> str:
        """The ``user_properties`` value (Note [Records travel with reports]): JSON for
        another process, a :class:`LocalPayload` when ``local`` (read in this one)."""
        if local:
            return LocalPayload(self.records)
        return json.dumps({"records": {r.id: r.to_json() for r in self.records}})


class LocalPayload(str):
    """A test's records handed to :func:`collect` in the same process (Note [Records
    travel with reports]): a ``str`` (whatever writes ``user_properties`` as text, junit
    XML or a report log, writes a note), holding the records as they are."""

    records: list[Record]

    def __new__(cls, records: list[Record]) -> LocalPayload:
        self = super().__new__(cls, f"{len(records)} harness record(s), in the run's "
                                    "results file")
        self.records = records
        return self


def status_of(outcome: str, when: str, wasxfail: Optional[str]) -> Status:
    """A test's record status from pytest's outcome of one phase (an xfail counts as fail)."""
    if outcome == "passed":
        return Status.PASS
    if outcome == "skipped":
        return Status.FAIL if wasxfail is not None else Status.SKIP
    return Status.FAIL if when == "call" else Status.ERROR


def unsupported_reason(error: Optional[BaseException]) -> Optional[str]:
    """Why a check's exception means "this stack lacks it" (None: it does not)."""
    if error is None or not missing_kernel(error):
        return None
    if isinstance(error, Unsupported):
        return str(error)
    return _described(error)


def _described(error: BaseException) -> str:
    """``Type: message`` on one line."""
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def _first_line(error: Optional[BaseException]) -> str:
    return "" if error is None else _described(error)[:300]


def baseline_ids(nodeid: str, state: RunState) -> list[str]:
    """The record ids the selected baseline holds for this test node (sorted)."""
    return state.baseline_ids(nodeid)


def conclude_check(nodeid: str, records: Iterable[Record], error: Optional[BaseException],
                   *, outcome: str, when: str, wasxfail: Optional[str],
                   state: RunState) -> CheckEnd:
    """Judge one test's phase: its records, the ids it did not reach, known-failure
    tagging, and its share of the judgement (:func:`harness.verdict.check_failures`;
    Note [Same ids whatever the outcome]).

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
    recorded = {r.id for r in records}
    unreached = [rid for rid in baseline_ids(nodeid, state) if rid not in recorded]
    if reason is not None:  # Note [Missing features of older stacks] in harness.device
        if not any(r.status in FAILING for r in records):
            end.skip = f"unsupported: {reason}"
        for rid in unreached or [auto_record(nodeid)]:
            records.append(Record(id=rid, status=Status.UNSUPPORTED, test=nodeid,
                                  message=reason, info={"reason": reason}))
    elif outcome != "passed" and (unreached or not records):
        status = status_of(outcome, when, wasxfail)
        message = _first_line(error) if status != Status.SKIP else ""
        for rid in unreached or [auto_record(nodeid)]:
            records.append(Record(id=rid, status=status, test=nodeid, message=message))
    if not records:
        records.append(Record(id=auto_record(nodeid), test=nodeid,
                              status=status_of(outcome, when, wasxfail)))
    if wasxfail:  # a known failure (harness.known_failures)
        for rec in records:
            rec.info.setdefault("known_failure", wasxfail)
    for rec in records:  # Note [One device per xdist worker] in harness/device.py
        rec.info.setdefault("device_index", state.device.index)
    failing = [r for r in records if r.status in FAILING]
    if failing and outcome == "passed" and end.skip is None:
        end.failures.append("\n".join(f"{r.id}: {r.message or r.status}" for r in failing))
    end.findings, failing_findings = verdict.check_failures(
        records, state.base, state.base_name, state.settings.fail_on)
    if failing_findings:
        end.skip = None  # a capability the baseline had is lost: that fails, it is no skip
        reproduce = reproduce_of(nodeid, state.device.type, state.settings)
        end.failures.append(regress.failure_message(failing_findings, reproduce))
    return end


def collect(state: RunState, nodeid: str, when: str, outcome: str,
            payloads: Iterable[str]) -> None:
    """Add one report to the run: the test's outcome (the call phase's, or the first
    phase that did not pass) and the records of its payloads. A record id another test
    already recorded is a harness error naming both tests (the run is NO-GO)."""
    if when == "call" or outcome != "passed":
        if when == "call" or nodeid not in state.run.outcomes:
            state.run.outcomes[nodeid] = outcome
    for value in payloads:
        if isinstance(value, LocalPayload):
            records = value.records
        else:
            records = [Record.from_json(record_id, data)
                       for record_id, data in json.loads(value)["records"].items()]
        for record in records:
            try:
                state.run.add(record)
            except DuplicateRecord as exc:
                state.errors.append(str(exc))
