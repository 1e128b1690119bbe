"""Op conformance over the curated catalog (``harness/ops/catalog.py``).

One test per op x dtype (``test_op[exp-float16]``) runs every sample of that op forward
and backward on the DUT against the CPU references and records each case:
``ops/<op>/<dtype>/<fwd|bwd>/<sample>``. The large (>= 1M elements) samples run in
``test_op_large[exp]`` (marked slow; all dtypes of the op). ``--op-filter REGEX`` selects cases by case id
(``exp-float16-fwd-odd257``); a failing case's message ends with a command that reruns
exactly that case.

Why one test per op x dtype and not per case: thousands of pytest items cost more than
the cases themselves on a 2-core CPU run; the record ids, not the test ids, are what
baselines track, and they stay stable either way.
"""

from __future__ import annotations

import re

import pytest
import torch

from harness import ids
from harness.ops import CATALOG, DETERMINISM_DTYPES, filter_regex
from harness.ops.runner import DIRECTIONS, case_id, run_cases
from harness.results import lower


def _matches(entry, dtypes, slow: bool, regex) -> bool:
    cases = [case_id(entry.name, dtype, d, s.name) for dtype, s in entry.cases(dtypes)
             if s.slow == slow for d in DIRECTIONS]
    return bool(cases) and (regex is None or any(regex.search(c) for c in cases))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``test_op`` per op x dtype; ``test_op_large`` per op (its dtypes in one test, so a
    default run skips one item per op, not one per op x dtype). Only groups with a case
    matching ``--op-filter`` are generated."""
    op_filter = metafunc.config.getoption("op_filter", None)
    regex = re.compile(op_filter) if op_filter else None
    name = metafunc.function.__name__
    if name == "test_op":
        metafunc.parametrize(("entry", "dtype"), [
            pytest.param(e, dt, id=f"{e.name}-{dt}") for e in CATALOG for dt in e.all_dtypes
            if _matches(e, (dt,), False, regex)])
    elif name == "test_op_large":
        metafunc.parametrize("entry", [pytest.param(e, id=e.name) for e in CATALOG
                                       if _matches(e, e.all_dtypes, True, regex)])


def _run(entry, dtypes, slow, device, results, settings) -> None:
    regex = re.compile(settings.op_filter) if settings.op_filter else None
    cases = []
    for dtype, sample in entry.cases(dtypes):
        if sample.slow != slow:
            continue
        directions = tuple(d for d in DIRECTIONS if regex is None
                           or regex.search(case_id(entry.name, dtype, d, sample.name)))
        if directions:
            cases.append((dtype, sample, directions))
    ran = 0
    # judged together (Note [A test's outputs judged together] in harness/ops/runner.py)
    for (dtype, sample), outcomes in run_cases(device, entry, cases, settings.seed):
        for outcome in outcomes:
            ran += 1
            case = case_id(entry.name, dtype, outcome.direction, sample.name)
            outcome.record(results, f"{outcome.message}\n(device {device.type}, dtype {dtype}, "
                                    f"standard {outcome.standard})",
                           reproduce_args=f"--op-filter '{filter_regex(case)}'")
    if not ran:
        pytest.skip(f"no {entry.name} case matches --op-filter {settings.op_filter!r}")


def test_op(entry, dtype, device, results, settings):
    """Every non-slow sample of one op in one dtype, forward and backward."""
    _run(entry, (dtype,), False, device, results, settings)


@pytest.mark.slow
def test_op_large(entry, device, results, settings):
    """The >= 1M-element samples of one op, in each of its dtypes."""
    _run(entry, entry.all_dtypes, True, device, results, settings)


# --------------------------------------------------------------------- determinism
# A kernel that adds run-to-run noise (a race in a split-K reduction, an uninitialised
# workspace) can stay inside every precision standard; only running twice shows it.

@pytest.mark.parametrize("dtype", DETERMINISM_DTYPES)
def test_mm_run_twice_bit_identical(dtype, device, results, settings):
    case = ids.op_case("mm", dtype, "run_twice", "64x96x48")
    if settings.op_filter and not re.search(settings.op_filter, case):
        pytest.skip(f"{case} does not match --op-filter {settings.op_filter!r}")
    gen = torch.Generator().manual_seed(settings.seed + 7)
    torch_dtype = getattr(torch, dtype)
    a = torch.randn(64, 96, generator=gen).to(torch_dtype)
    b = torch.randn(96, 48, generator=gen).to(torch_dtype)
    with device.scope():
        da, db = a.to(device.torch_device), b.to(device.torch_device)
        first = torch.mm(da, db)
        second = torch.mm(da, db)
        device.synchronize()
    first, second = first.cpu(), second.cpu()
    differ = int((first.view(-1).view(torch.int16 if first.element_size() == 2 else torch.int32)
                  != second.view(-1).view(torch.int16 if first.element_size() == 2
                                          else torch.int32)).sum())
    results.check(ids.op_record("mm", dtype, "run_twice", "64x96x48"), differ == 0,
                  f"torch.mm ({dtype}, 64x96 @ 96x48) is not deterministic: {differ} of "
                  f"{first.numel()} elements differ bitwise between two identical runs on "
                  f"{device.type}; max difference "
                  f"{float((first.double() - second.double()).abs().max()):.3g}",
                  metrics={"bitwise_mismatched": float(differ)},
                  rules={"bitwise_mismatched": lower(1.0, 0.0)})
