"""Known failures as data (harness.known_failures): strict xfail, applied at collection."""

import types

import pytest

from harness import known_failures
from harness.known_failures import KnownFailure

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
