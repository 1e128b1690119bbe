"""Breadth: PyTorch's OpInfo database (``op_db``) swept on the DUT (:mod:`harness.ops.opinfo`).

Two tests share one set of record ids (Note [OpInfo record ids] in harness/ops/opinfo.py):

* ``test_opinfo_slice``: a fixed slice (~50 training ops in float32) that runs in the
  default selection, so every CI run exercises the sweep;
* ``test_opinfo_sweep``: every other (op, dtype) of ``op_db``, marked ``slow``.

``--op-filter REGEX`` keeps the cases whose id (``opinfo/<op>[:<variant>]/<dtype>``)
matches; ``--op-budget SECONDS`` bounds the sweep's run time (cases past it are recorded
as ``skip``). Ops the DUT has no kernel for are recorded ``unsupported``, ops it runs on
the host CPU ``fallback``: the capability matrix, compared with the baseline like any
other record.
"""

import pytest

from harness.ops import opinfo
from harness.plugin import settings_of

OP_DB, WHY_NOT = opinfo.load_op_db()
SLICE, REST = opinfo.slice_and_rest(opinfo.cases(OP_DB) if OP_DB is not None else [])


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    if OP_DB is None:
        metafunc.parametrize("case", [pytest.param(None, marks=pytest.mark.skip(
            reason=WHY_NOT))], ids=["op_db-unavailable"])
        return
    settings = settings_of(metafunc.config)
    slow = metafunc.function.__name__ == "test_opinfo_sweep"
    if slow and settings is not None and not settings.run_slow:
        # One skipped item (and one record) instead of ~1,700 when the sweep is off.
        metafunc.parametrize("case", [None], ids=["not-selected"])
        return
    op_filter = settings.op_filter if settings is not None else None
    chosen = opinfo.select(REST if slow else SLICE, op_filter)
    metafunc.parametrize("case", chosen, ids=[c.param_id for c in chosen])


@pytest.fixture(scope="module")
def budget(settings):
    """One budget for the whole sweep (slice and rest), started by its first case."""
    return opinfo.Budget(settings.op_budget)


def _check(case, device, results, budget):
    op = opinfo.find_op(OP_DB, case.key)
    outcomes = opinfo.run_case(op, case, device, budget=budget)
    for outcome in outcomes:
        outcome.record(results)
    skipped = [o for o in outcomes if o.status == "skip"]
    if skipped and len(skipped) == len(outcomes):
        pytest.skip(skipped[0].message)


def test_opinfo_slice(case, device, results, budget):
    _check(case, device, results, budget)


@pytest.mark.slow
def test_opinfo_sweep(case, device, results, budget):
    _check(case, device, results, budget)
