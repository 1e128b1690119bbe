"""Known failures as data: device type x stack glob x test/record glob -> reason, link.

A known failure on a stack (an NPU kernel CANN 8.0 gets wrong) should neither turn every
nightly red nor hide inside a baseline. It is listed here, with the reason and a link to
the issue that tracks it, and the matching tests run as ``xfail(strict=True)``: while the
failure lasts the test is ``xfailed``; once the stack fixes it the test XPASSes, which
strict mode turns into a failure, so the entry gets removed (torch-xpu-ops keeps its skip
list the same way; OpInfo's ``DecorateInfo`` is the same idea inside the op database).

Matching (Note [Known-failure globs]): ``device_type`` is a device type or ``*``; ``stack``
is an :func:`fnmatch.fnmatchcase` glob over the fingerprint's ``stack_id``
(``cann-8.0.*``); ``match`` is a glob over the test's node id
(``suites/amp/test_convergence.py::*``) or over a record id the test writes
(``ops/erfinv/bfloat16/*``, ``opinfo/nn.functional.gelu/float16*``).

Note [Known-failure globs]
~~~~~~~~~~~~~~~~~~~~~~~~~~
Entries are applied at collection, before any record exists, so a record glob is matched
against the record ids a test is known to write: every record id of a catalog test
(``ops/<op>/<dtype>/<fwd|bwd>/<sample>``, from the catalog row), the case id of an OpInfo
test (``opinfo/<op>/<dtype>``: its per-sample digests are unknown until it runs, so end
such globs with ``*``), and the automatic record id of any other test
(``amp/test_convergence/test_x[fp16]``). The whole test is expected to fail: a test with
several records is xfailed when any of them fails (narrow it with ``--op-filter`` to see
the others).

A check that records a failure without raising (the catalog records ``fail`` and lets the
plugin fail the report) raises for a listed test, so pytest's xfail sees the failure.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Any, Iterable, Optional, Sequence

import pytest

from harness.ids import FAILING
from harness.recorder import auto_record_id


@dataclasses.dataclass(frozen=True)
class KnownFailure:
    """One entry of the known-failures table.

    Attributes:
        device_type: ``npu``, ``cuda``, ``xpu``, ``mps``, ``cpu`` or ``*``.
        stack: glob over the fingerprint's ``stack_id`` (``cann-8.0.*``, ``*``).
        match: glob over a test node id or a record id (Note [Known-failure globs]).
        reason: what fails and why, one sentence.
        link: where it is tracked (an issue URL or ``vendor#123``).
    """

    device_type: str
    stack: str
    match: str
    reason: str
    link: str

    def applies_to(self, fingerprint: dict) -> bool:
        device = str(fingerprint.get("device_type", ""))
        stack = str(fingerprint.get("stack_id", ""))
        return (self.device_type in ("*", device)
                and fnmatch.fnmatchcase(stack, self.stack))

    def matches(self, candidates: Iterable[str]) -> bool:
        return any(fnmatch.fnmatchcase(c, self.match) for c in candidates)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


# The cumprod backward rows once listed here were the harness's own doing: its aten-op
# recording was a dispatch mode around the measured DUT call, which makes torch take
# another formula (Note [Measured without the harness] in harness/ops/policy.py).
KNOWN_FAILURES: tuple[KnownFailure, ...] = (
    # measured on the CI lines: 2.4.1 and 2.5.1 return the sum, 2.1.2 has no flat
    # reduce_scatter on gloo (unsupported), 2.13 and 2.15 divide
    KnownFailure(
        device_type="cpu", stack="torch-2.[45].*", match="ws*-reduce_scatter_tensor_avg/*",
        reason="gloo's reduce_scatter_tensor ignores ReduceOp.AVG and returns the sum "
               "(all_reduce refuses AVG on these lines; gloo learnt AVG later)",
        link="https://github.com/pytorch/pytorch/pull/149781"),
)
"""The table: one row per known failure (see :data:`EXAMPLE`)."""

EXAMPLE = KnownFailure(
    device_type="npu", stack="cann-8.0.RC*", match="ops/erfinv/bfloat16/*",
    reason="bf16 erfinv is computed in fp16 on this CANN release (relative error 1e-2)",
    link="https://gitee.com/ascend/pytorch/issues/EXAMPLE")
"""How an entry reads (documentation; not in the table)."""


def entries_for(fingerprint: dict, table: Optional[Sequence[KnownFailure]] = None
                ) -> list[KnownFailure]:
    """The entries that apply to this device type and stack (for the report)."""
    rows = KNOWN_FAILURES if table is None else table
    return [entry for entry in rows if entry.applies_to(fingerprint)]


def candidates(item: Any) -> list[str]:
    """The names a known-failure glob is matched against (Note [Known-failure globs])."""
    nodeid = item.nodeid
    out = [nodeid, auto_record_id(nodeid)]
    params = getattr(getattr(item, "callspec", None), "params", {})
    entry, dtype, case = params.get("entry"), params.get("dtype"), params.get("case")
    if entry is not None and hasattr(entry, "samples"):
        from harness.ops.runner import DIRECTIONS, record_id

        dtypes = [dtype] if isinstance(dtype, str) else list(getattr(entry, "all_dtypes", ()))
        out += [record_id(entry.name, dt, d, s.name) for dt, s in entry.cases(dtypes)
                for d in DIRECTIONS]
    if case is not None and hasattr(case, "id"):
        out.append(case.id)
    return out


def apply(items: list, fingerprint: Optional[dict],
          table: Optional[Sequence[KnownFailure]] = None) -> list[tuple[str, KnownFailure]]:
    """Mark every collected test a known failure matches as ``xfail(strict=True)``.

    Returns ``(nodeid, entry)`` for each test marked.
    """
    if not fingerprint:
        return []
    entries = entries_for(fingerprint, table)
    marked = []
    for item in items if entries else ():
        names = candidates(item)
        entry = next((e for e in entries if e.matches(names)), None)
        if entry is None:
            continue
        item.add_marker(pytest.mark.xfail(
            strict=True, reason=f"known failure on {entry.device_type}/{entry.stack}: "
                                f"{entry.reason} ({entry.link})"))
        _raise_on_failed_records(item)
        marked.append((item.nodeid, entry))
    return marked


def _raise_on_failed_records(item: Any) -> None:
    """Make a listed test raise when it recorded a failure (the catalog records ``fail``
    without raising; pytest's xfail only sees exceptions)."""
    runtest = item.runtest

    def run() -> None:
        runtest()
        recorder = getattr(item, "funcargs", {}).get("results")
        failed = [r for r in getattr(recorder, "records", ())
                  if getattr(r, "status", None) in FAILING]
        if failed:
            raise AssertionError("known failure reproduced: " + ", ".join(
                f"{r.id} {r.status}" for r in failed[:5]))

    item.runtest = run
