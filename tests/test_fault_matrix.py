"""Every registered fault turns a clean, green run red (``python -m harness faults check``).

One clean run of all faults' checks records a fresh baseline; then one run per fault,
compared against it. This is the suite's proof that its checks can fail. The command runs
as an early job (Note [Early jobs] in tests/early.py): it starts at collection and runs
beside the other tests; the tests below read its JSON report.
"""

import json
import sys
from pathlib import Path

import early
import pytest

from harness import faults

ROOT = Path(__file__).resolve().parent.parent
OPT_IN_FAMILIES = ("bench",)
"""Families whose checks are opt-in in the run too (benchmarks: several process runs per
fault, minutes each); `python -m harness faults check --family bench` proves them."""
FAULTS = sorted(name for name, fault in faults.registry().items()
                if fault.family not in OPT_IN_FAMILIES)


def _faults_check(env: dict):
    args = [arg for name in FAULTS for arg in ("--fault", name)]
    return early.run([sys.executable, "-m", "harness", "faults", "check", "--json", "--device",
                      "cpu", "--jobs", "2", *args], env=env, timeout=1800, cwd=ROOT)


MATRIX = early.Job("fault matrix", _faults_check)
EARLY = (MATRIX,)


@pytest.fixture(scope="module")
def matrix():
    proc = early.result(MATRIX)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"`harness faults check` printed no JSON report (exit {proc.returncode}):\n"
                    f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    for fault in report["faults"]:
        print(f"{fault['name']}: caught {fault['caught']} by {fault['caught_by'][:1]} "
              f"({fault['seconds']} s)")
    return report


def test_clean_run_is_green(matrix):
    assert matrix["clean_ok"], (f"the clean run failed: {matrix['clean_failed']}\n"
                                f"{matrix.get('clean_output_tail', '')}")


def test_every_fault_was_run(matrix):
    assert sorted(f["name"] for f in matrix["faults"]) == FAULTS


@pytest.mark.parametrize("name", FAULTS)
def test_fault_is_caught(matrix, name):
    result = next(f for f in matrix["faults"] if f["name"] == name)
    assert result["caught"], (f"fault {name} ({result['description']}) was not caught; "
                              f"output:\n{result.get('output_tail', '')}")
