"""Every registered fault turns a clean, green run red (``python -m harness faults check``).

One clean run of all faults' checks records a fresh baseline; then one run per fault,
compared against it. This is the suite's proof that its checks can fail.
"""

from pathlib import Path

import pytest

from harness import faults
from harness.faults import check as fault_check

ROOT = Path(__file__).resolve().parent.parent
OPT_IN_FAMILIES = ("bench",)
"""Families whose checks are opt-in in the run too (benchmarks: several process runs per
fault, minutes each); `python -m harness faults check --family bench` proves them."""
FAULTS = sorted(name for name, fault in faults.registry().items()
                if fault.family not in OPT_IN_FAMILIES)


@pytest.fixture(scope="module")
def matrix():
    clean, found = fault_check.check([faults.registry()[n] for n in FAULTS], root=ROOT,
                                     device="cpu", jobs=2)
    print(fault_check.report_text(clean, found))
    return clean, {r.fault.name: r for r in found}


def test_clean_run_is_green(matrix):
    clean, _ = matrix
    assert fault_check.clean_ok(clean), (
        f"the clean run failed: {clean.failed}\n{clean.output[-3000:]}")


@pytest.mark.parametrize("name", FAULTS)
def test_fault_is_caught(matrix, name):
    _, found = matrix
    result = found[name]
    assert result.caught, (f"fault {name} ({result.fault.description}) was not caught by "
                           f"{list(result.fault.checks)}; output:\n{result.run.output[-3000:]}")
    assert set(result.caught_by) <= set(matrix[0].outcomes) | set(result.run.outcomes)
