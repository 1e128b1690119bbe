"""Sharded and tensor-parallel training: FSDP2 and DTensor against one process.

- FSDP2 (``fully_shard``) trains 3 SGD-with-momentum steps, in float32 and under a
  ``MixedPrecisionPolicy`` (bfloat16 parameters, float32 reduction), against one process
  on the full batch in float64;
- its sharded model and optimizer state (``torch.distributed.checkpoint``) loads into a
  fresh ``fully_shard`` model that then trains on bit-identically;
- a column-then-row parallel MLP (``ColwiseParallel``, ``RowwiseParallel``) matches the
  MLP on one process: forward, gradients, one optimizer step.

The rank programs are :mod:`harness.distributed.parallel`; torch lines without the public
APIs record ``unsupported`` (Note [Public parallel APIs only] there).
"""

from __future__ import annotations

import pytest

from harness import ids
from harness.distributed import DistCase, SubCheck, parallel
from harness.distributed.checks import WORLD_SIZES
from harness.distributed.judge import (
    judge_fsdp,
    judge_fsdp_round_trip,
    judge_tp,
    record_problem,
    record_verdict,
)

pytestmark = pytest.mark.distributed

# variant -> the dtype its record id names (the dtype the model computes in)
FSDP_CASES = {"float32": "float32", "bf16_mixed": "bfloat16"}


@pytest.mark.parametrize("case", [
    DistCase(ws, SubCheck.of(parallel.fsdp_train, name=f"fsdp/{variant}", variant=variant))
    for ws in WORLD_SIZES for variant in FSDP_CASES], ids=lambda c: c.id)
def test_fsdp2_matches_single_process(case, dist, results):
    variant = case.check.kwargs["variant"]
    record_id = ids.record("distributed", "fsdp2", FSDP_CASES[variant],
                           "train" if variant == "float32" else "mixed_precision",
                           f"ws{case.world_size}")
    outcome = dist(case)
    if record_problem(results, record_id, outcome):
        return
    record_verdict(results, record_id, judge_fsdp(outcome.values, variant=variant))


@pytest.mark.parametrize("case", [
    DistCase(ws, SubCheck.of(parallel.fsdp_state_round_trip, name="fsdp/state_round_trip"))
    for ws in WORLD_SIZES], ids=lambda c: c.id)
def test_fsdp2_sharded_state_round_trip(case, dist, results):
    record_id = ids.record("distributed", "fsdp2", "float32", "state_round_trip",
                           f"ws{case.world_size}")
    outcome = dist(case)
    if record_problem(results, record_id, outcome):
        return
    record_verdict(results, record_id, judge_fsdp_round_trip(outcome.values))


@pytest.mark.parametrize("case", [
    DistCase(ws, SubCheck.of(parallel.tp_mlp, name="tp/mlp")) for ws in WORLD_SIZES],
    ids=lambda c: c.id)
def test_tensor_parallel_mlp_matches_one_device(case, dist, results):
    record_id = ids.record("distributed", "tensor_parallel", "float32", "colwise_rowwise_mlp",
                           f"ws{case.world_size}")
    outcome = dist(case)
    if record_problem(results, record_id, outcome):
        return
    record_verdict(results, record_id, judge_tp(outcome.values))
