"""DDP gradient synchronisation: DDP on ``ws`` ranks equals one process on the full batch.

Every rank trains 5 SGD steps; gradients and parameters are compared with a float64
single-process reference, and the ranks' parameters must be bit-identical after every
step. Variants cover the DDP options and training patterns that take other code paths;
``rank_init`` starts each rank from its own weights, which DDP's construction must
replace with rank 0's (Note [Rank-different init] in harness/distributed/checks.py), and
``static_graph`` trains with ``static_graph=True`` over several buckets.
"""

from __future__ import annotations

from typing import Callable

import pytest

from harness import ids
from harness.distributed import DistCase, SubCheck, checks
from harness.distributed.checks import WORLD_SIZES
from harness.distributed.judge import (
    judge_amp,
    judge_amp_found_inf,
    judge_buffers,
    judge_ddp,
    judge_sync_batchnorm,
    record_problem,
    record_verdict,
)

pytestmark = pytest.mark.distributed

STEPS = 5
# (dtype, variant): the DDP paths checked; see harness.distributed.checks.DDP_VARIANTS
DDP_CASES = [("float32", "plain"), ("float64", "plain"), ("float32", "unused_params"),
             ("float32", "bucket_view"), ("float32", "small_buckets"),
             ("float32", "no_sync"), ("float32", "join"), ("float32", "rank_init"),
             ("float32", "static_graph")]


def _case(ws: int, name: str, fn: Callable, **kwargs) -> DistCase:
    return DistCase(ws, SubCheck.of(fn, name=name, **kwargs))


@pytest.mark.parametrize("case", [
    _case(ws, f"ddp/{dtype}/{variant}", checks.ddp_train, variant=variant, dtype=dtype,
          steps=STEPS)
    for ws in WORLD_SIZES for dtype, variant in DDP_CASES], ids=lambda c: c.id)
def test_ddp_matches_single_process(case, dist, results):
    kwargs = case.check.kwargs
    record_id = ids.record("distributed", "ddp", kwargs['dtype'], kwargs['variant'], f"ws{case.world_size}")
    outcome = dist(case)
    if record_problem(results, record_id, outcome):
        return
    verdict = judge_ddp(outcome.values, dtype=kwargs["dtype"], variant=kwargs["variant"],
                        steps=STEPS, world_size=case.world_size)
    record_verdict(results, record_id, verdict)


@pytest.mark.parametrize("case", [_case(ws, "ddp/amp", checks.ddp_amp, steps=STEPS)
                                  for ws in WORLD_SIZES], ids=lambda c: c.id)
def test_ddp_amp_grad_scaler(case, dist, results):
    outcome = dist(case)
    if record_problem(results, ids.record("distributed", "ddp", "amp", "grad_scaler", f"ws{case.world_size}"), outcome):
        return
    amp_dtype, verdict = judge_amp(outcome.values)
    record_id = ids.record("distributed", "ddp", amp_dtype, "amp_grad_scaler", f"ws{case.world_size}")
    record_verdict(results, record_id, verdict)


INF_STEP = 2


@pytest.mark.parametrize("case", [_case(ws, "ddp/amp_found_inf", checks.ddp_amp, steps=STEPS,
                                        inf_step=INF_STEP, inf_rank=ws - 1)
                                  for ws in WORLD_SIZES], ids=lambda c: c.id)
def test_ddp_amp_skips_an_overflow_on_every_rank(case, dist, results):
    """The last rank alone overflows at one step: found_inf must reach every rank
    (Note [found_inf across ranks] in harness/distributed/checks.py)."""
    outcome = dist(case)
    if record_problem(results, ids.record("distributed", "ddp", "amp", "found_inf_sync",
                                          f"ws{case.world_size}"), outcome):
        return
    amp_dtype, verdict = judge_amp_found_inf(outcome.values, INF_STEP)
    record_id = ids.record("distributed", "ddp", amp_dtype, "amp_found_inf_sync",
                           f"ws{case.world_size}")
    record_verdict(results, record_id, verdict)


@pytest.mark.parametrize("case", [_case(ws, "ddp/buffers", checks.ddp_buffers)
                                  for ws in WORLD_SIZES], ids=lambda c: c.id)
def test_ddp_broadcast_buffers(case, dist, results):
    record_id = ids.record("distributed", "ddp", "float32", "broadcast_buffers", f"ws{case.world_size}")
    outcome = dist(case)
    if record_problem(results, record_id, outcome):
        return
    verdict = judge_buffers(outcome.values)
    record_verdict(results, record_id, verdict)


@pytest.mark.parametrize("case", [_case(ws, "ddp/sync_batchnorm", checks.sync_batchnorm)
                                  for ws in WORLD_SIZES], ids=lambda c: c.id)
def test_sync_batchnorm_matches_full_batch(case, dist, results):
    record_id = ids.record("distributed", "ddp", "float32", "sync_batchnorm", f"ws{case.world_size}")
    outcome = dist(case)
    if record_problem(results, record_id, outcome):
        return
    verdict = judge_sync_batchnorm(outcome.values)
    record_verdict(results, record_id, verdict)
