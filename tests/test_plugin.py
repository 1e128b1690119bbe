"""The plugin end to end, through pytester."""

import json

import pytest

from harness.results import read_document

CHECK = """
import torch
from harness.results import lower

VALUE = {value!r}

def test_metric(device, results):
    with device.scope():
        x = torch.ones(3, device=device.torch_device) * 2
    results.record("demo/metric/float32", metrics={{"err": VALUE, "x": float(x.sum())}},
                   rules={{"err": lower(rel=2.0, abs=1e-6)}})

def test_plain():
    assert True
"""


@pytest.fixture
def project(pytester):
    pytester.makeconftest('pytest_plugins = ["harness.plugin"]')
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    (pytester.path / "suites" / "demo").mkdir(parents=True)

    def write_check(value):
        (pytester.path / "suites" / "demo" / "test_demo.py").write_text(CHECK.format(value=value))

    write_check(1e-3)
    pytester.write_check = write_check
    return pytester


def _results(pytester, folder="results"):
    path = sorted((pytester.path / folder).glob("*.json.gz"))[-1]
    return read_document(path)


def test_help_lists_every_option_with_defaults(project):
    result = project.runpytest("--help")
    result.stdout.fnmatch_lines(["NPU conformance harness:", "*--device=TYPE*",
                                 "*Default: 'auto'*", "*--baseline=MODE*", "*--baseline-dir=PATH*",
                                 "*--baseline-against=STACK_ID*", "*--results-dir=PATH*",
                                 "*--inject-fault=NAME*", "*--seed=N*"])


@pytest.mark.parametrize("args,message", [
    (["--device", "tpu"], "*argument --device: invalid choice: 'tpu'*"),
    (["--baseline", "save"], "*argument --baseline: invalid choice: 'save'*"),
    (["--seed", "x"], "*argument --seed: 'x' is not an integer*"),
    (["--baseline-against", "cann"], "*malformed stack id 'cann'*"),
    (["--op-filter", "("], "*'(' is not a regular expression*"),
    (["--baseline", "record", "--baseline-against", "torch-1.0"],
     "*cannot be combined with --baseline-against*"),
    (["--inject-fault", "no.such"], "*unknown fault 'no.such'*"),
])
def test_bad_options_are_usage_errors_naming_the_value(project, args, message):
    result = project.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_unavailable_device_is_a_usage_error_with_reason(project):
    result = project.runpytest("--device", "cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--device cuda is not usable: *doctor*"])


def test_header_names_device_reasons_stack_baseline_and_seed(project):
    result = project.runpytest("--seed", "7")
    result.stdout.fnmatch_lines([
        "harness: device cpu:0 (*) [[]auto[]]",
        "harness:   npu not used: *",
        "harness:   cuda not used: *",
        "harness: stack torch-* (torch *); cpu/*",
        "harness: baseline: NOT COMPARED: no baseline for cpu/*/torch-* stored: none",
        "harness: seed 7 (+ crc32(nodeid) per test)",
    ])
    result.assert_outcomes(passed=2)


def test_record_then_compare_round_trip(project):
    project.runpytest("--baseline", "record", "--baseline-dir", "b").assert_outcomes(passed=2)
    [stored] = list((project.path / "b" / "cpu").glob("*/*.json"))
    base = json.loads(stored.read_text())
    assert set(base["records"]) == {"demo/metric/float32", "demo/test_demo/test_metric",
                                    "demo/test_demo/test_plain"} - {"demo/test_demo/test_metric"}
    again = project.runpytest("--baseline-dir", "b")
    again.assert_outcomes(passed=2)
    again.stdout.fnmatch_lines(["harness: baseline: *(same stack)", "VERDICT: GO",
                                "*0 regression, 0 review, 0 improvement, 0 new, 0 lost, 0 not-run"])


def test_metric_drift_is_review_exit_0_and_names_everything(project):
    project.runpytest("--baseline", "record", "--baseline-dir", "b")
    project.write_check(5e-3)
    result = project.runpytest("--baseline-dir", "b", "--alerts", "alerts.json")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([
        "VERDICT: REVIEW (1 metric(s) moved beyond their baseline rule; every check passes)",
        "1 group(s) to look at (1 finding lines), worst first:",
        "  ?beyond its baseline rule? demo/metric/float32: err 0.001 -> 0.005 (5x) ?lower is "
        "better, ratio 2, floor 1e-06?",
        "      python -m pytest 'suites/demo/test_demo.py::test_metric' --device cpu --seed 0 "
        "--baseline-dir=*",
    ])
    alerts = json.loads((project.path / "alerts.json").read_text())
    assert alerts["verdict"] == "review"
    assert alerts["reviews"][0]["record_id"] == "demo/metric/float32"
    assert (project.path / "alerts.md").read_text().startswith("# Conformance run: REVIEW")


def test_metric_drift_fails_the_producing_test_with_fail_on_review(project):
    project.runpytest("--baseline", "record", "--baseline-dir", "b")
    project.write_check(5e-3)
    result = project.runpytest("--baseline-dir", "b", "--fail-on", "review")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*moved beyond the stored baseline's rule (failing because of --fail-on review):*",
        "*review: demo/metric/float32 err 0.001 -> 0.005*",
        "*reproduce: python -m pytest 'suites/demo/test_demo.py::test_metric' --device cpu*",
    ])


def test_improvement_is_listed_not_failed(project):
    project.runpytest("--baseline", "record", "--baseline-dir", "b")
    project.write_check(1e-5)
    result = project.runpytest("--baseline-dir", "b")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["VERDICT: GO", "*vs baseline torch-*: 0 regression, 0 review, "
                                 "1 improvement, 0 new, 0 lost, 0 not-run"])


def test_hand_edited_better_baseline_makes_the_run_fail_naming_the_record(project):
    project.runpytest("--baseline", "record", "--baseline-dir", "b")
    [stored] = list((project.path / "b" / "cpu").glob("*/*.json"))
    doc = json.loads(stored.read_text())
    doc["records"]["demo/metric/float32"]["metrics"]["err"] = 1e-9
    stored.write_text(json.dumps(doc))
    result = project.runpytest("--baseline-dir", "b", "--fail-on", "review")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED suites/demo/test_demo.py::test_metric*"])
    assert "demo/metric/float32" in result.stdout.str()


def test_corrupt_baseline_is_an_error_naming_the_file_but_results_are_written(project):
    project.runpytest("--baseline", "record", "--baseline-dir", "b")
    [stored] = list((project.path / "b" / "cpu").glob("*/*.json"))
    stored.write_text(stored.read_text()[:40])
    result = project.runpytest("--baseline-dir", "b")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"harness: baseline: ERROR {stored}:*not valid JSON*",
                                 f"ERROR baseline error: {stored}:*"])
    assert _results(project)["records"]


def test_status_change_is_a_regression(project):
    project.runpytest("--baseline", "record", "--baseline-dir", "b")
    (project.path / "suites" / "demo" / "test_demo.py").write_text(
        CHECK.format(value=1e-3).replace("assert True", "assert False"))
    result = project.runpytest("--baseline-dir", "b")
    result.stdout.fnmatch_lines(["*regression: demo/test_demo/test_plain status pass -> fail*"])


def test_npu_marker_applies_to_suites_only(project):
    project.makepyfile(test_outside="def test_x():\n    pass\n")
    result = project.runpytest("-m", "npu", "--collect-only", "-q")
    assert "test_outside.py" not in result.stdout.str()
    result.stdout.fnmatch_lines(["suites/demo/test_demo.py::test_metric"])


def test_slow_checks_skip_unless_asked(project):
    (project.path / "suites" / "demo" / "test_big.py").write_text(
        "import pytest\n@pytest.mark.slow\ndef test_big():\n    pass\n")
    project.runpytest("suites/demo/test_big.py").assert_outcomes(skipped=1)
    project.runpytest("suites/demo/test_big.py", "--run-slow").assert_outcomes(passed=1)


def test_seed_is_per_test_and_stable(project):
    (project.path / "suites" / "demo" / "test_seed.py").write_text(
        "import random, zlib\n"
        "def test_a(request):\n"
        "    expect = (3 + zlib.crc32(request.node.nodeid.encode())) & 0xFFFFFFFF\n"
        "    random.seed(expect); want = random.random()\n"
        "    assert True\n")
    first = project.runpytest("suites/demo/test_seed.py", "--seed", "3")
    first.assert_outcomes(passed=1)
    from harness.recorder import seed_for
    assert seed_for(3, "a") == seed_for(3, "a") != seed_for(3, "b")


def test_injected_fault_turns_example_red(project):
    (project.path / "suites" / "demo" / "test_add.py").write_text(
        "import torch\n"
        "def test_add(device):\n"
        "    with device.scope():\n"
        "        assert (torch.ones(2) + torch.ones(2)).eq(2).all()\n")
    project.runpytest("suites/demo/test_add.py").assert_outcomes(passed=1)
    result = project.runpytest("suites/demo/test_add.py", "--inject-fault", "example.add_drift")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["harness: INJECTED FAULTS: example.add_drift"])


def test_xdist_records_reach_the_controller(project):
    for index in range(4):
        (project.path / "suites" / "demo" / f"test_x{index}.py").write_text(
            "def test_r(results):\n"
            f"    results.record('demo/x{index}', metrics={{'v': {index}}})\n")
    result = project.runpytest_subprocess("-n", "2", "--baseline", "record",
                                          "--baseline-dir", "b")
    result.assert_outcomes(passed=6)
    records = _results(project)["records"]
    assert {f"demo/x{i}" for i in range(4)} <= set(records)
    [stored] = list((project.path / "b" / "cpu").glob("*/*.json"))
    assert {f"demo/x{i}" for i in range(4)} <= set(json.loads(stored.read_text())["records"])


def test_records_reach_the_results_file_in_one_process(project):
    """Note [Records travel with reports]: in one process the records are handed over as
    they are (no JSON round trip); the results file has every record, metric and rule."""
    project.runpytest("--junitxml=junit.xml").assert_outcomes(passed=2)
    doc = _results(project)
    assert doc["records"]["demo/metric/float32"]["metrics"] == {"err": 1e-3, "x": 6.0}
    assert doc["records"]["demo/metric/float32"]["rules"]["err"] == {
        "better": "lower", "rel": 2.0, "abs": 1e-6}


def test_a_local_payload_hands_over_the_records_and_json_the_same_values():
    """The two forms of a test's payload: the record objects themselves in one process,
    JSON for an xdist worker; both add the same records to the run."""
    from harness import checkrun
    from harness.results import Record, lower

    record = Record("demo/x", metrics={"err": 0.5, "n": 3}, rules={"err": lower(2.0, 1e-6)},
                    test="t", info={"k": [1, 2]})
    end = checkrun.CheckEnd([record], [])
    local, remote = end.payload(local=True), end.payload()
    assert isinstance(local, checkrun.LocalPayload) and local.records == [record]
    assert isinstance(remote, str) and json.loads(remote)["records"]["demo/x"]["metrics"] == {
        "err": 0.5, "n": 3}

    class State:  # what collect reads of the session
        def __init__(self):
            from harness.results import RunResults
            self.run, self.errors = RunResults(fingerprint={}), []

    for payload in (local, remote):
        state = State()
        checkrun.collect(state, "t", "call", "passed", [payload])
        assert state.run.records["demo/x"].to_json() == record.to_json()
        assert state.run.outcomes == {"t": "passed"}
    state = State()
    checkrun.collect(state, "t", "call", "passed", [local])
    assert state.run.records["demo/x"] is record  # handed over, not copied


CHECK_FROZEN = """
import gc

def test_frozen(results):
    results.check("demo/frozen", gc.get_freeze_count() > 0 and gc.isenabled(),
                  metrics={"frozen": gc.get_freeze_count(), "collecting": gc.isenabled()})
"""


CHECK_YOUNG_GC = """
import gc
from harness import memory

def test_young_gc(results):
    with memory.young_gc():
        frozen_inside = gc.get_freeze_count()
    results.check("demo/young_gc", True, metrics={
        "inside": frozen_inside, "after": gc.get_freeze_count()})
"""


def test_a_memory_block_leaves_what_it_froze_frozen_in_a_session(project):
    """Note [Collected objects frozen]: in a harness session young_gc does not unfreeze the
    session's objects when its block ends (every later collection would walk torch's again);
    outside one it does, and the session restores the setting it found."""
    from harness.memory import collect

    (project.path / "suites" / "demo" / "test_young_gc.py").write_text(CHECK_YOUNG_GC)
    project.runpytest_subprocess("suites/demo/test_young_gc.py").assert_outcomes(passed=1)
    metrics = _results(project)["records"]["demo/young_gc"]["metrics"]
    assert metrics["after"] > 0.99 * metrics["inside"] > 10_000  # (unfrozen: 0)
    outer = collect.keep_frozen(False)  # this test session's own setting, set aside
    try:
        project.runpytest("suites/demo/test_young_gc.py").assert_outcomes(passed=1)
        assert collect.keep_frozen(False) is False  # the in-process session restored it
    finally:
        collect.keep_frozen(outer)


def test_collected_objects_are_frozen_before_the_checks_run(project):
    """Note [Collected objects frozen]: by the time a check runs, what collection built is
    in the permanent generation and the collector, paused over collection, is on again."""
    (project.path / "suites" / "demo" / "test_frozen.py").write_text(CHECK_FROZEN)
    project.runpytest_subprocess("suites/demo/test_frozen.py").assert_outcomes(passed=1)
    metrics = _results(project)["records"]["demo/frozen"]["metrics"]
    assert metrics["frozen"] > 10_000
    assert metrics["collecting"] == 1


def test_what_is_alive_at_the_exit_is_frozen_for_the_interpreters_last_collections():
    """Note [Collected objects frozen]: the plugin freezes every live object at the exit,
    also after a check unfroze them (harness.memory.young_gc), so the interpreter's own
    final collections walk none of them (6.9 s of a default run's exit on a Zen 3)."""
    import subprocess
    import sys

    code = ("import atexit, gc\nimport harness.plugin\ngc.unfreeze()\n"
            "assert gc.get_freeze_count() == 0\natexit._run_exitfuncs()\n"
            "print(gc.get_freeze_count())\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert int(proc.stdout.split()[-1]) > 100_000, proc.stdout


def test_the_exit_collects_everything_where_a_nanobind_extension_is_loaded():
    """Note [Collected objects frozen]: nanobind prints what the exit did not free as
    leaks (Triton's libtriton with torch 2.15), so with one loaded the exit unfreezes."""
    import subprocess
    import sys

    code = ("import atexit, gc, sys, types\nimport harness.plugin\n"
            "assert gc.get_freeze_count() > 0 and not harness.plugin._nanobind_loaded()\n"
            "nb_func = type('nb_func', (), {'__module__': 'nanobind'})\n"
            "ext = types.ModuleType('fake_ext')\next.__file__ = '/site/fake_ext.so'\n"
            "ext.f = nb_func()\nsys.modules['fake_ext'] = ext\n"
            "atexit._run_exitfuncs()\nprint(gc.get_freeze_count())\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert int(proc.stdout.split()[-1]) == 0, proc.stdout
