"""Known failures as data (harness.known_failures): strict xfail, applied at collection."""

import types
from pathlib import Path

import pytest

from harness import known_failures
from harness.known_failures import KnownFailure

ROOT = Path(__file__).resolve().parents[1]

CHECKS = """
def test_records_a_failure(results):
    results.record("demo/broken/float16", status="fail", message="off by 1e-2")

def test_records_a_pass(results):
    results.record("demo/fixed/float16", status="pass")

def test_raises():
    assert 1 == 2, "wrong"

def test_unlisted(results):
    results.record("demo/other/float16", status="pass")
"""


@pytest.fixture
def project(pytester, monkeypatch):
    pytester.makeconftest('pytest_plugins = ["harness.plugin"]')
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    (pytester.path / "suites" / "demo").mkdir(parents=True)
    (pytester.path / "suites" / "demo" / "test_demo.py").write_text(CHECKS)

    def table(*rows):
        monkeypatch.setattr(known_failures, "KNOWN_FAILURES", tuple(rows))
    pytester.table = table
    return pytester


def _row(match, device="cpu", stack="torch-*"):
    return KnownFailure(device, stack, match, "a known bug", "https://example.org/issues/1")


def test_a_listed_failing_check_is_xfailed(project):
    project.table(_row("suites/demo/test_demo.py::test_records_a_failure"),
                  _row("*::test_raises"))
    result = project.runpytest("--device", "cpu", "--baseline", "off", "-rxX")
    result.assert_outcomes(xfailed=2, passed=2)
    result.stdout.fnmatch_lines(["*XFAIL*test_records_a_failure*a known bug*example.org*"])


def test_a_listed_check_that_passes_fails_strict(project):
    project.table(_row("demo/test_demo/test_records_a_pass"))  # by its record id
    result = project.runpytest("--device", "cpu", "--baseline", "off")
    result.assert_outcomes(failed=3, passed=1)  # the listed pass (XPASS strict) + 2 bugs
    result.stdout.fnmatch_lines(["*XPASS(strict)*known failure*"])


def test_entries_for_another_device_or_stack_do_not_apply(project):
    project.table(_row("*test_records_a_failure", device="npu"),
                  _row("*test_raises", stack="torch-1.*"))
    result = project.runpytest("--device", "cpu", "--baseline", "off")
    result.assert_outcomes(failed=2, passed=2)


def test_entries_for_selects_by_device_type_and_stack_glob():
    rows = (_row("a", device="npu", stack="cann-8.0.*"), _row("b", device="*", stack="*"),
            _row("c", device="npu", stack="cann-8.1.*"))
    fingerprint = {"device_type": "npu", "stack_id": "cann-8.0.RC3"}
    assert [r.match for r in known_failures.entries_for(fingerprint, rows)] == ["a", "b"]
    assert known_failures.entries_for(fingerprint) == []  # nothing shipped is for npu
    assert known_failures.EXAMPLE.applies_to({"device_type": "npu", "stack_id": "cann-8.0.RC2"})


def test_record_globs_match_the_records_a_catalog_test_writes():
    from harness.ops import BY_NAME
    from harness.ops.opinfo import OpInfoCase

    catalog = types.SimpleNamespace(
        nodeid="suites/ops/test_catalog.py::test_op[erfinv-bfloat16]",
        callspec=types.SimpleNamespace(params={"entry": BY_NAME["erfinv"],
                                               "dtype": "bfloat16"}))
    sweep = types.SimpleNamespace(
        nodeid="suites/ops/test_opinfo.py::test_opinfo_slice[exp-float32]",
        callspec=types.SimpleNamespace(params={"case": OpInfoCase("exp", "float32")}))
    assert known_failures.EXAMPLE.matches(known_failures.candidates(catalog))
    assert _row("ops/erfinv/bfloat16/bwd/odd257").matches(known_failures.candidates(catalog))
    assert not _row("ops/erfinv/float16/*").matches(known_failures.candidates(catalog))
    assert _row("opinfo/exp/float32*").matches(known_failures.candidates(sweep))


def test_an_entry_applies_where_its_probe_finds_the_defect_whatever_the_stack(monkeypatch):
    """Note [Where a stack defect is]: a stack glob of '*' and a probe, so a defect that
    lives on 2.4 to 2.8 is known on every one of them, and on none where it is fixed."""
    from harness import stack_probes

    found = {"defect": True}
    monkeypatch.setitem(stack_probes.PROBES, "demo_defect", lambda: found["defect"])
    stack_probes.result.cache_clear()
    row = KnownFailure("cpu", "*", ("a/*", "b/*"), "a known bug", "x#1",
                       probes=("demo_defect",))
    for stack in ("torch-2.4.1", "torch-2.6.0", "torch-2.8.0"):
        assert row.applies_to({"device_type": "cpu", "stack_id": stack})
    assert row.matches(["b/1"]) and not row.matches(["c/1"])
    found["defect"] = False
    stack_probes.result.cache_clear()
    assert not row.applies_to({"device_type": "cpu", "stack_id": "torch-2.6.0"})
    found["defect"] = None  # cannot tell (the API is absent): the check says unsupported
    stack_probes.result.cache_clear()
    assert not row.applies_to({"device_type": "cpu", "stack_id": "torch-2.6.0"})
    stack_probes.result.cache_clear()


def test_a_probe_runs_only_where_a_collected_test_is_its_entrys(project, monkeypatch):
    """A run that collects none of an entry's tests (one test reproduced) runs none of
    its probes; one that collects it runs the probe once and marks the test."""
    from harness import stack_probes

    calls = []
    monkeypatch.setitem(stack_probes.PROBES, "demo_defect", lambda: calls.append(1) or True)
    stack_probes.result.cache_clear()
    project.table(KnownFailure("cpu", "*", "*::test_raises", "a known bug", "x#1",
                               probes=("demo_defect",)))
    args = ("--device", "cpu", "--baseline", "off")
    project.runpytest("suites/demo/test_demo.py::test_unlisted", *args).assert_outcomes(
        passed=1)
    assert calls == []
    project.runpytest(*args).assert_outcomes(xfailed=1, failed=1, passed=2)
    assert calls == [1]
    stack_probes.result.cache_clear()


def test_an_unknown_probe_is_refused_naming_the_table():
    with pytest.raises(ValueError, match="unknown stack probe.*stack_probes.PROBES"):
        KnownFailure("cpu", "*", "a/*", "r", "l", probes=("no_such_probe",))


def test_the_gloo_probe_measures_this_stack():
    """The shipped probe runs on this torch and agrees with what the collective check
    measures here (2.13 and 2.15 divide; 2.4 to 2.8 return the sum)."""
    import torch

    from harness import stack_probes

    found = stack_probes.PROBES["gloo_reduce_scatter_avg_sums"]()
    major_minor = tuple(int(p) for p in torch.__version__.split(".")[:2])
    if major_minor >= (2, 13):
        assert found is False
    elif (2, 4) <= major_minor <= (2, 8):
        assert found is True
    every = {e.match if isinstance(e.match, str) else e.match[0]: e.probes
             for e in known_failures.KNOWN_FAILURES}
    assert all(probes for probes in every.values())  # shipped rows say where, not when


def test_the_fused_sgd_probe_measures_this_stack():
    """The shipped probe agrees with torch's fused CPU SGD as it is here: 2.13 leaves a
    16-bit parameter's SIMD blocks unchanged (pytorch#191763), 2.14 fixed it (#192545);
    it cannot tell where fused SGD refuses the CPU."""
    import torch

    from harness import stack_probes

    found = stack_probes.PROBES["fused_sgd_skips_16bit_updates"]()
    major_minor = tuple(int(p) for p in torch.__version__.split(".")[:2])
    if major_minor == (2, 13):
        assert found is True
    elif major_minor >= (2, 14):
        assert found is False
    param = torch.zeros(64, dtype=torch.bfloat16, requires_grad=True)
    try:
        opt = torch.optim.SGD([param], lr=0.5, fused=True)
    except (RuntimeError, TypeError, ValueError):
        assert found is None
        return
    param.grad = torch.ones(64, dtype=torch.bfloat16)
    opt.step()
    if not bool((param.detach() == -0.5).all()):
        assert found is True  # whatever the version: the probe sees what a step does


def test_the_low_precision_update_check_fails_where_the_fused_sgd_probe_finds_the_defect(
        tmp_path):
    """The known failure's check is the one that catches the defect: on a stack where
    the probe finds it, the fused SGD cases are xfailed (strict: they fail), and the run
    stays GO; elsewhere they pass. Either way the other variants pass."""
    import subprocess
    import sys

    from harness import stack_probes

    test = "suites/optim/test_optimizer_state.py::test_low_precision_param_state"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rxX",
         f"{test}[sgd-fused-bfloat16]", f"{test}[sgd-forloop-bfloat16]", "--baseline", "off",
         f"--results-dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:]
    assert "VERDICT: GO" in out, out[-3000:]
    if stack_probes.result("fused_sgd_skips_16bit_updates") is True:
        assert "1 passed, 1 xfailed" in out and "pytorch/issues/191763" in out, out[-3000:]
    else:  # fixed (2.14 on), or fused SGD refuses the CPU (recorded unsupported)
        assert "2 passed" in out and "xfailed" not in out, out[-3000:]


def test_the_fused_sgd_defect_is_the_simulated_npus_never_a_real_ascends(monkeypatch):
    """SimNPU runs the host CPU's kernels, so the CPU's fused SGD defect is its too; on a
    real Ascend (no simulator loaded) the NPU's own kernel is judged, whatever the host's
    torch gets wrong."""
    from harness import stack_probes

    simulated = {"loaded": False}
    monkeypatch.setitem(stack_probes.PROBES, "fused_sgd_skips_16bit_updates", lambda: True)
    monkeypatch.setitem(stack_probes.PROBES, "simnpu_runs_host_kernels",
                        lambda: simulated["loaded"])

    def listed(device_type):
        stack_probes.result.cache_clear()
        rows = known_failures.entries_for({"device_type": device_type, "stack_id": "x"})
        return any(row.link.endswith("/191763") for row in rows)

    try:
        assert listed("cpu") and not listed("npu")
        simulated["loaded"] = True
        assert listed("npu")
    finally:
        stack_probes.result.cache_clear()
