"""Collectives against NumPy: all_reduce (sum, avg, max), all_gather, reduce_scatter,
broadcast over float32, float16, bfloat16 and int64, 1 element to ~1M; the sharding
collectives (all_to_all_single even and uneven, all_to_all, all_gather_into_tensor,
reduce_scatter_tensor sum and avg) at 1 and 1000 elements (Note [Sharding collectives]
in harness/distributed/checks.py); and barrier.

Sums may differ from the exact float64 sum by the recursive-summation bound
(``ws * eps * sum|x|``); everything else must be exact. An op or dtype the backend
refuses is recorded ``unsupported`` (the capability matrix), and a baseline that had it
supported turns that into a regression.
"""

from __future__ import annotations

import pytest

from harness import ids
from harness.distributed import DistCase, SubCheck, checks
from harness.distributed.checks import (
    COLLECTIVE_OPS,
    COLLECTIVE_SIZES,
    SHARDING_OPS,
    SHARDING_SIZES,
    WORLD_SIZES,
)
from harness.distributed.judge import (
    judge_barrier,
    judge_collective,
    record_error,
    record_problem,
    record_verdict,
)

pytestmark = pytest.mark.distributed

DTYPES = ("float32", "float16", "bfloat16", "int64")


# dtype by dtype: a rank keeps one dtype's inputs (Note [Inputs kept across collectives])
@pytest.mark.parametrize("case", [
    DistCase(ws, SubCheck.of(checks.collective, name=f"{op}/{dtype}", op=op, dtype=dtype,
                             sizes=list(sizes)))
    for ws in WORLD_SIZES for dtype in DTYPES
    for ops, sizes in ((COLLECTIVE_OPS, COLLECTIVE_SIZES), (SHARDING_OPS, SHARDING_SIZES))
    for op in ops], ids=lambda c: c.id)
def test_collective_matches_numpy(case, dist, results):
    op, dtype, sizes = (case.check.kwargs[k] for k in ("op", "dtype", "sizes"))
    outcome = dist(case)
    for size in sizes:
        record_id = ids.record("distributed", op, dtype, f"n={size}", f"ws{case.world_size}")
        if not outcome.ok:  # the whole story once, then a pointer to it
            if size == sizes[0]:
                record_error(results, record_id, outcome.problem())
            else:
                results.record(record_id, status="error",
                               message=f"not measured: see n={sizes[0]}")
            continue
        verdict = judge_collective(outcome.values, str(size), op=op, dtype=dtype)
        record_verdict(results, record_id, verdict)


@pytest.mark.parametrize("case", [DistCase(ws, SubCheck.of(checks.barrier, name="barrier"))
                                  for ws in WORLD_SIZES], ids=lambda c: c.id)
def test_barrier_waits_for_every_rank(case, dist, results):
    record_id = ids.record("distributed", "barrier", "none", "staggered", f"ws{case.world_size}")
    outcome = dist(case)
    if record_problem(results, record_id, outcome):
        return
    verdict = judge_barrier(outcome.values)
    record_verdict(results, record_id, verdict)
