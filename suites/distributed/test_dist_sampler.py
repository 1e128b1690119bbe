"""DistributedSampler: shards disjoint and covering, ``set_epoch`` reshuffles and every
rank agrees on the order, ``drop_last`` both ways (ranks from the process group)."""

from __future__ import annotations

import pytest

from harness import ids
from harness.distributed import DistCase, SubCheck, checks
from harness.distributed.checks import WORLD_SIZES
from harness.distributed.judge import judge_sampler, record_problem, record_verdict

pytestmark = pytest.mark.distributed


@pytest.mark.parametrize("case", [
    DistCase(ws, SubCheck.of(checks.sampler, name=f"sampler/drop_last={drop}",
                         drop_last=drop))
    for ws in WORLD_SIZES for drop in (False, True)], ids=lambda c: c.id)
def test_distributed_sampler_shards(case, dist, results):
    drop = case.check.kwargs["drop_last"]
    record_id = ids.record("distributed", "sampler", "none", f"drop_last={drop}", f"ws{case.world_size}")
    outcome = dist(case)
    if record_problem(results, record_id, outcome):
        return
    verdict = judge_sampler(outcome.values, drop_last=drop)
    record_verdict(results, record_id, verdict)
