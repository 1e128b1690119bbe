"""Edge values with hypothesis: inf, -inf, NaN, +-0, subnormals, max finite, large values.

Each (op, dtype) runs one hypothesis property (profile ``ci`` by default: derandomised,
40 examples; ``nightly``: many more; choose with ``HARNESS_HYPOTHESIS_PROFILE=nightly``
or ``--hypothesis-profile nightly``). The property: the DUT's output is NaN / +inf /
-inf / finite exactly where the reference allows (Note [Edge-value agreement] in
harness/ops/edge.py). One record per (op, dtype): examples run and examples that mismatched.

``test_special_values[<row>-<dtype>]``: every catalog row whose NaN/Inf behaviour is
documented (harness/ops/specials.py, ``python -m harness ops nan``) on its special-value
samples, forward and backward, judged by the op policy plus the exact rule for specials
(Note [Special-value semantics] in harness/ops/edge.py). Records
``ops/<row>/<dtype>/<fwd|bwd>/specials_<sample>``; ``--op-filter`` selects them by case id
(``clamp-float32-fwd-specials_typical``).

``test_nan_keeps_the_shape[<row>-<dtype>]``: every row whose NaN values are left open
(``specials.SHAPE_ONLY``) on one NaN sample, forward, judged on the output's shape and dtype
only (Note [NaN shape samples] in harness/ops/edge.py). Records
``ops/<row>/<dtype>/fwd/nan_shape_<sample>``.
"""

import re

import pytest
import torch
from hypothesis import given

from harness import dtypes as dt
from harness import ids
from harness.ops import edge
from harness.ops.catalog import BY_NAME
from harness.ops.runner import case_id, filter_regex
from harness.ops.specials import REASONS, SEMANTICS
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
        results.check(ids.record("edge", op.name, name), seen["mismatches"] == 0,
                      f"{seen['mismatches']} of {seen['examples']} hypothesis examples "
                      f"disagree with the reference on NaN/Inf positions; first:\n"
                      f"{seen['first']}",
                      metrics={"examples": seen["examples"], "mismatches": seen["mismatches"]},
                      rules={"mismatches": lower(rel=1.0, abs=0)})


def _special_params(config):
    op_filter = config.getoption("op_filter", None)
    regex = re.compile(op_filter) if op_filter else None
    params = []
    for name in SEMANTICS:
        entry = BY_NAME[name]
        for dtype in edge.special_dtypes(entry):
            cases = [case_id(name, dtype, d, s.name) for s in edge.special_samples(entry)
                     for d in edge.special_directions(entry)]
            if regex is None or any(regex.search(c) for c in cases):
                params.append(pytest.param(entry, dtype, id=f"{name}-{dtype}"))
    return params


def _nan_shape_params(config):
    op_filter = config.getoption("op_filter", None)
    regex = re.compile(op_filter) if op_filter else None
    return [pytest.param(entry, dtype, sample, id=f"{entry.name}-{dtype}")
            for entry in BY_NAME.values() for dtype in edge.nan_shape_dtypes(entry)
            for sample in edge.nan_shape_samples(entry)
            if regex is None or regex.search(case_id(entry.name, dtype, "fwd", sample.name))]


def pytest_generate_tests(metafunc):
    if metafunc.function.__name__ == "test_special_values":
        metafunc.parametrize(("entry", "dtype"), _special_params(metafunc.config))
    if metafunc.function.__name__ == "test_nan_keeps_the_shape":
        metafunc.parametrize(("entry", "dtype", "sample"), _nan_shape_params(metafunc.config))


def test_special_values(entry, dtype, device, results, settings):
    """NaN, +-inf and signed zeros where the row's documentation says what they do."""
    regex = re.compile(settings.op_filter) if settings.op_filter else None
    samples = []
    for sample in edge.special_samples(entry):
        directions = tuple(d for d in edge.special_directions(entry) if regex is None
                           or regex.search(case_id(entry.name, dtype, d, sample.name)))
        if directions:
            samples.append((sample, directions))
    ran = 0
    for sample, outcomes in edge.run_special_samples(device, entry, dtype, samples,
                                                     settings.seed):
        for outcome in outcomes:
            ran += 1
            case = case_id(entry.name, dtype, outcome.direction, sample.name)
            outcome.record(results, f"{outcome.message}\n(device {device.type}, dtype {dtype}, "
                                    f"standard {outcome.standard}; documented: "
                                    f"{SEMANTICS[entry.name].doc})",
                           reproduce_args=f"--op-filter '{filter_regex(case)}'")
    if not ran:
        pytest.skip(f"no {entry.name} special-value case matches --op-filter "
                    f"{settings.op_filter!r}")


def test_nan_keeps_the_shape(entry, dtype, sample, device, results, settings):
    """A row whose NaN values torch leaves open still answers a NaN input with the shape and
    dtype of a finite one's (Note [NaN shape samples] in harness/ops/edge.py)."""
    for outcome in edge.run_nan_shape(device, entry, dtype, sample, settings.seed):
        case = case_id(entry.name, dtype, outcome.direction, sample.name)
        outcome.record(results, f"{outcome.message}\n(device {device.type}, dtype {dtype}; "
                                f"values unjudged: {REASONS[entry.name]})",
                       reproduce_args=f"--op-filter '{filter_regex(case)}'")
