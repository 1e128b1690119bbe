"""Edge values with hypothesis: inf, -inf, NaN, +-0, subnormals, max finite, large values.

Each (op, dtype) runs one hypothesis property (profile ``ci`` by default: derandomised,
40 examples; ``nightly``: many more; choose with ``HARNESS_HYPOTHESIS_PROFILE=nightly``
or ``--hypothesis-profile nightly``). The property: the DUT's output is NaN / +inf /
-inf / finite exactly where the reference allows (Note [Edge-value agreement] in
harness/ops/edge.py). One record per (op, dtype): examples run and examples that mismatched.
"""

import pytest
import torch
from hypothesis import given

from harness import dtypes as dt
from harness.ops import edge
from harness.results import lower

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=dt.ids)
@pytest.mark.parametrize("op", edge.EDGE_OPS, ids=lambda op: op.name)
def test_edge_values_agree_with_reference(op, dtype, device, results):
    seen = {"examples": 0, "mismatches": 0, "first": ""}

    @given(example=edge.inputs(op, dtype))
    def agrees(example):
        seen["examples"] += 1
        outcome = edge.check(op, example, device, dtype)
        if not outcome.ok:
            seen["mismatches"] += 1
            seen["first"] = seen["first"] or outcome.message
        assert outcome.ok, outcome.message

    name = dt.name(dtype)
    try:
        agrees()
    finally:
        results.check(f"edge/{op.name}/{name}", seen["mismatches"] == 0,
                      f"{seen['mismatches']} of {seen['examples']} hypothesis examples "
                      f"disagree with the reference on NaN/Inf positions; first:\n"
                      f"{seen['first']}",
                      metrics={"examples": seen["examples"], "mismatches": seen["mismatches"]},
                      rules={"mismatches": lower(rel=1.0, abs=0)})
