"""Pipeline parallelism: activations forward and gradients back by point-to-point sends.

One stage per rank (a chain: two stages at world size 2, four at 4), GPipe steps of two
micro-batches, by ``send``/``recv`` and by ``batch_isend_irecv``; every stage's outputs,
received gradients, parameter gradients and parameters after an SGD step equal the whole
model on one process on the full batch (float64), within float32's tolerance (Note
[Pipeline step] in harness/distributed/checks.py).
"""

from __future__ import annotations

import pytest

from harness import ids
from harness.distributed import DistCase, SubCheck, checks
from harness.distributed.checks import PIPELINE_TRANSPORTS, WORLD_SIZES
from harness.distributed.judge import judge_pipeline, record_problem, record_verdict

pytestmark = pytest.mark.distributed


@pytest.mark.parametrize("case", [
    DistCase(ws, SubCheck.of(checks.pipeline, name=f"pipeline/{transport}",
                             transport=transport))
    for ws in WORLD_SIZES for transport in PIPELINE_TRANSPORTS], ids=lambda c: c.id)
def test_pipeline_step_matches_single_process(case, dist, results):
    transport = case.check.kwargs["transport"]
    record_id = ids.record("distributed", "pipeline", "float32", transport,
                           f"ws{case.world_size}")
    outcome = dist(case)
    if record_problem(results, record_id, outcome):
        return
    record_verdict(results, record_id, judge_pipeline(outcome.values))
