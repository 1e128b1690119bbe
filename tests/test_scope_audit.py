"""The DUT-scope audit (harness/faults/audit.py, Note [DUT-scope audit])."""

import sys
import tempfile
from pathlib import Path

import early
import pytest
import torch

from harness import faults
from harness.faults import audit
from harness.faults import check as fault_check

ROOT = Path(__file__).resolve().parents[1]
FACTOR = 1 + audit.SHIFT


def _collect_suites(env: dict):
    """Every check under suites/, slow ones and the model suite's cases included."""
    return early.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                      "no:cacheprovider", "-p", "no:randomly", "suites", "--device", "cpu",
                      "--baseline", "off", "--run-slow", *audit.MODEL_ARGS],
                     env=env, timeout=600, cwd=ROOT)


COLLECTION = early.Job("suite collection", _collect_suites)
EARLY = (COLLECTION,)


def test_the_audit_shifts_every_result_in_the_scope_and_nothing_outside(cpu, monkeypatch):
    x = torch.linspace(-1, 1, 8)
    clean = torch.exp(x)                  # before any fault is active
    monkeypatch.setattr(faults, "_active", [audit.FAULTS[0]])
    with cpu.scope():
        y = torch.exp(x)
        view = y[2:]                      # a view: aliases y, not shifted again
        z = torch.zeros(8)
        z.add_(1.0)                       # in place: the written tensor is shifted
        index = torch.argmax(x)           # integer results are left alone
        copied = x.to(torch.float64)      # conversions and copies are data movement
    assert torch.allclose(y, torch.exp(x) * FACTOR)
    assert torch.equal(copied, x.double())
    assert view.data_ptr() == y[2:].data_ptr() and torch.equal(view, y[2:])
    assert torch.allclose(z, torch.full((8,), FACTOR))
    assert int(index) == 7
    assert torch.equal(torch.exp(x), clean)  # the audit is active, but outside the scope


CHECKS = """
import torch

def test_reference_outside_the_scope(device, results):
    x = torch.randn(64)
    with device.scope():
        dut = torch.tanh(x.to(device.torch_device)).cpu()
    ref = torch.tanh(x.double())
    err = float((dut.double() - ref).abs().max())
    results.record("demo/tanh", status="pass" if err < 1e-5 else "fail", metrics={"err": err})

def test_reference_inside_the_scope(device, results):
    x = torch.randn(64)
    with device.scope():
        dut = torch.tanh(x.to(device.torch_device)).cpu()
        ref = torch.tanh(x.double())   # the bug the audit exists for
    err = float((dut.double() - ref).abs().max())
    results.record("demo/tanh_bad", status="pass" if err < 1e-5 else "fail", metrics={"err": err})
"""


def test_the_audit_fails_a_check_whose_reference_is_outside_and_not_one_inside(pytester):
    pytester.makeconftest('pytest_plugins = ["harness.plugin"]')
    (pytester.path / "suites" / "demo").mkdir(parents=True)
    (pytester.path / "suites" / "demo" / "test_demo.py").write_text(CHECKS)
    clean = pytester.runpytest("-p", "no:cacheprovider", "--device", "cpu", "--baseline", "off")
    clean.assert_outcomes(passed=2)
    shifted = pytester.runpytest("-p", "no:cacheprovider", "--device", "cpu", "--baseline",
                                 "off", "--inject-fault", "example.scope_audit")
    shifted.assert_outcomes(failed=1, passed=1)
    shifted.stdout.fnmatch_lines(["FAILED*test_reference_outside_the_scope*"])


def test_every_family_has_an_audit_and_each_says_what_it_does_not_list():
    families = {f.family for f in audit.FAULTS}
    assert families == {"ops", "training", "memory", "distributed", "example", "model",
                        "graph"}
    assert set(audit.SUITE_FAMILIES.values()) - families == {"bench"}  # all NOT_NUMERIC
    assert all(reason.strip() for reason in audit.NOT_NUMERIC.values())
    registered = faults.registry()
    assert all(registered[f.name] is f for f in audit.FAULTS)


@pytest.fixture(scope="module")
def suite_checks():
    proc = early.result(COLLECTION)
    nodeids = [line.strip() for line in proc.stdout.splitlines() if "::" in line]
    assert proc.returncode == 0 and nodeids, (f"collecting suites/ failed (exit "
                                              f"{proc.returncode}):\n{proc.stdout[-2000:]}\n"
                                              f"{proc.stderr[-2000:]}")
    return nodeids


def test_every_check_under_suites_is_in_its_audit_or_exempted(suite_checks):
    """Note [Audit coverage]: no check is left out of the scope audit without a reason."""
    folders = {n.split("/")[1] for n in suite_checks}
    assert folders == set(audit.SUITE_FAMILIES), "every suite folder collected a check"
    problems = audit.coverage_problems(suite_checks)
    assert not problems, "\n".join(problems)


def test_audit_coverage_names_a_forgotten_check_and_a_stale_entry(suite_checks):
    forgotten = "suites/norm/test_new.py::test_forgotten[float16]"
    problems = audit.coverage_problems([*suite_checks, forgotten])
    assert len(problems) == 1 and problems[0].startswith(
        "suites/norm/test_new.py::test_forgotten: in neither the training audit")
    finder = "suites/amp/test_layer_agreement.py::test_finder_names_a_perturbed_layer"
    problems = audit.coverage_problems([n for n in suite_checks if n != finder])
    assert problems == [f"training.scope_audit lists {finder!r}, which names no collected "
                        "check: renamed or removed?"]


def test_exemptions_hold_their_checks_and_nothing_beside_them():
    assert audit.exemption("suites/bench/test_throughput.py::test_benchmark[mm]")
    assert audit.exemption("suites/ops/test_opinfo.py::test_opinfo_slice[argmax-float32]")
    assert audit.exemption("suites/ops/test_opinfo.py::test_opinfo_slice[exp-float32]") is None
    assert audit.exemption("suites/memory/test_leaks.py::test_no_leak_per_step[amp]")
    assert audit.exemption("suites/memory/test_leaks_more.py::test_x") is None  # not a prefix


def _every_listed_check_fails(fault, select=()):
    with tempfile.TemporaryDirectory() as tmp:
        run = fault_check.run_pytest([*fault.checks, *fault.pytest_args, *select, "--device",
                                      "cpu", "--baseline", "off", "--inject-fault", fault.name],
                                     Path(tmp), root=ROOT, timeout=900)
    ran = {n: o for n, o in run.outcomes.items() if o != "skipped"}
    assert ran, run.output[-2000:]
    survivors = sorted(n for n, o in ran.items() if o != "failed" and not audit.exemption(n))
    assert not survivors, (f"{fault.name}: these checks pass although everything the DUT "
                           f"computes is shifted by {audit.SHIFT:g}: is their reference "
                           f"computed inside device.scope()? {survivors}")
    return ran


@pytest.mark.parametrize("family", ["ops", "example", "model"])
def test_every_quick_check_of_a_fast_family_fails_under_its_audit(family):
    ran = _every_listed_check_fails(registry_fault(family), ("-m", "not slow"))
    if family == "model":  # the cases that compute fail; the views and copies are exempt
        assert sum(o == "failed" for o in ran.values()) >= 10


@pytest.mark.slow
@pytest.mark.parametrize("family, select", [
    ("ops", ("-m", "slow")), ("training", ()), ("memory", ()), ("distributed", ()),
    ("graph", ())], ids=["ops-slow-checks", "training", "memory", "distributed", "graph"])
def test_every_check_of_a_slow_family_fails_under_its_audit(family, select):
    _every_listed_check_fails(registry_fault(family), select)


def registry_fault(family):
    return faults.registry()[f"{family}.scope_audit"]
