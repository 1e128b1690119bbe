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

Note [Where a stack defect is]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A stack glob says where a defect was *measured*, not where it *is*: an entry for
``torch-2.[45].*`` was a false failure on 2.6 and 2.8, which have the same defect. So an
entry may name probes (:mod:`harness.stack_probes`): small, in-process experiments on the
stack itself (gloo's reduce-scatter with AVG on two ranks in threads, 40 ms) that say
whether the defect is present. The entry applies where its globs match and every probe
finds the defect; a probe that cannot run (the API is absent) finds nothing, and the check
itself then records ``unsupported``. A check that depends on the defect (FSDP2 on a
reduce-scatter that sums) names the same probe, so one experiment decides both.

A check that records a failure without raising (the catalog records ``fail`` and lets the
plugin fail the report) raises for a listed test, so pytest's xfail sees the failure.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Any, Iterable, Optional, Sequence, Union

import pytest

from harness import stack_probes
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
    match: Union[str, tuple[str, ...]]
    reason: str
    link: str
    probes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [name for name in self.probes if name not in stack_probes.PROBES]
        if unknown:
            raise ValueError(f"known failure {self.match!r}: unknown stack probe(s) {unknown}; "
                             f"choose from {sorted(stack_probes.PROBES)} "
                             "(harness.stack_probes.PROBES)")

    @property
    def globs(self) -> tuple[str, ...]:
        return (self.match,) if isinstance(self.match, str) else tuple(self.match)

    def applies_to(self, fingerprint: dict) -> bool:
        """Whether the defect is on this stack: the device type and the stack glob match,
        and every probe finds it (Note [Where a stack defect is])."""
        return self.may_apply_to(fingerprint) and self.probes_find_it()

    def may_apply_to(self, fingerprint: dict) -> bool:
        """The device type and the stack glob match (no probe run)."""
        device = str(fingerprint.get("device_type", ""))
        stack = str(fingerprint.get("stack_id", ""))
        return self.device_type in ("*", device) and fnmatch.fnmatchcase(stack, self.stack)

    def probes_find_it(self) -> bool:
        """Every probe finds the defect in this process's stack (each runs once)."""
        return all(stack_probes.present(name) for name in self.probes)

    def matches(self, candidates: Iterable[str]) -> bool:
        return any(fnmatch.fnmatchcase(c, glob) for c in candidates for glob in self.globs)

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["match"] = self.match if isinstance(self.match, str) else list(self.match)
        out["probes"] = list(self.probes)
        return out


_LOW_PRECISION_FUSED_SGD = (
    "suites/optim/test_optimizer_state.py::test_low_precision_param_state[sgd-fused-*")
_FUSED_SGD_DEFECT = ("fused SGD on the CPU leaves the whole SIMD blocks of an fp16 or bf16 "
                     "parameter unchanged (and reads its momentum through the wrong type)")
_FUSED_SGD_ISSUE = "https://github.com/pytorch/pytorch/issues/191763"

# The cumprod backward rows once listed here were the harness's own doing: its aten-op
# recording was a dispatch mode around the measured DUT call, which makes torch take
# another formula (Note [Measured without the harness] in harness/ops/policy.py).
KNOWN_FAILURES: tuple[KnownFailure, ...] = (
    # Found where it is, by a probe, not by the lines that were measured (Note [Where a
    # stack defect is]): 2.4 to 2.8 return the sum (measured 2.4.1, 2.5.1, 2.6.0, 2.8.0);
    # 2.1 has no flat reduce_scatter on gloo (the check records unsupported, the probe
    # finds nothing); 2.13 and 2.15 divide. Gloo learnt AVG for allreduce in #149781 and
    # its reduce-scatter path honours it after #171458 (fixing #162338).
    KnownFailure(
        device_type="cpu", stack="*", match="ws*-reduce_scatter_tensor_avg/*",
        reason="gloo's reduce_scatter_tensor ignores ReduceOp.AVG and returns the sum",
        link="https://github.com/pytorch/pytorch/issues/162338",
        probes=("gloo_reduce_scatter_avg_sums",)),
    # The same defect, seen through FSDP2 where it runs on the CPU (torch >= 2.7; 2.6
    # records unsupported: its CPU stream lacks record_event): fully_shard reduce-scatters
    # its gradients with ReduceOp.AVG, so on 2.7 and 2.8 they come back summed. Its state
    # round trip compares the model with itself after a reload, which the sum does not
    # change: it passes there (measured on 2.8.0), so it is not listed.
    KnownFailure(
        device_type="cpu", stack="*",
        match=("suites/distributed/test_dist_parallel.py::test_fsdp2_matches_single_process*",),
        reason="FSDP2 reduce-scatters gradients with ReduceOp.AVG, which this gloo sums "
               "(gloo's reduce_scatter_tensor ignores ReduceOp.AVG)",
        link="https://github.com/pytorch/pytorch/issues/162338",
        probes=("gloo_reduce_scatter_avg_sums", "fsdp2_on_cpu")),
    # Torch's fused CPU SGD for fp16 and bf16 parameters (Note [Low-precision parameter
    # updates] in suites/optim/test_optimizer_state.py): present on 2.4.1, 2.5.1, 2.6.0,
    # 2.8.0 and 2.13.0 (measured), fixed on 2.14.1 and 2.15.0 (#192545); 2.1 has no fused
    # SGD on the CPU (the check records unsupported, the probe finds nothing). The probe
    # says where it is.
    KnownFailure(
        device_type="cpu", stack="*", match=_LOW_PRECISION_FUSED_SGD,
        reason=_FUSED_SGD_DEFECT, link=_FUSED_SGD_ISSUE,
        probes=("fused_sgd_skips_16bit_updates",)),
    # The simulated NPU runs the host CPU's kernels (harness/simnpu): the same defect,
    # there, and never on a real Ascend, where the second probe finds no simulator.
    KnownFailure(
        device_type="npu", stack="*", match=_LOW_PRECISION_FUSED_SGD,
        reason=_FUSED_SGD_DEFECT + "; the simulated NPU runs the host's kernel",
        link=_FUSED_SGD_ISSUE,
        probes=("fused_sgd_skips_16bit_updates", "simnpu_runs_host_kernels")),
)
"""The table: one row per known failure (see :data:`EXAMPLE`)."""

EXAMPLE = KnownFailure(
    device_type="npu", stack="cann-8.0.RC*", match="ops/erfinv/bfloat16/*",
    reason="bf16 erfinv is computed in fp16 on this CANN release (relative error 1e-2)",
    link="https://gitee.com/ascend/pytorch/issues/EXAMPLE")
"""How an entry reads (documentation; not in the table)."""


def entries_for(fingerprint: dict, table: Optional[Sequence[KnownFailure]] = None
                ) -> list[KnownFailure]:
    """The entries that apply to this device type and stack (their probes run here)."""
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
    # a probe runs only where a collected test is one its entry names: a run that
    # selects none of them (one op's test, reproduced) runs none
    entries = [e for e in (KNOWN_FAILURES if table is None else table)
               if e.may_apply_to(fingerprint)]
    marked = []
    for item in items if entries else ():
        names = candidates(item)
        entry = next((e for e in entries if e.matches(names) and e.probes_find_it()), None)
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
