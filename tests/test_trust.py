"""Trustworthy verdicts: never GO on a red run, NOT COMPARED said loudly, nothing lost,
bad input answered with the cause and the fix (issue: trust)."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

CHECKS = """
import pytest
import torch
from harness.results import lower

VALUE = {value!r}
STATUS = {status!r}

def test_metric(device, results):
    with device.scope():
        x = torch.ones(3, device=device.torch_device) * 2
    results.record("demo/metric/float32", status=STATUS, metrics={{"err": VALUE}},
                   rules={{"err": lower(rel=2.0, abs=1e-6)}}, message="err too large")

def test_add(device, results):
    a = torch.linspace(1, 2, 64)
    with device.scope():
        dut = a + a
    err = float(((dut.double() - 2 * a.double()).abs() / (2 * a.double())).max())
    results.record("demo/add/float32", status="pass" if err < 1e-6 else "fail",
                   metrics={{"max_rel_err": err}}, rules={{"max_rel_err": lower(2.0, 1e-7)}},
                   message=f"add max_rel_err {{err:.3g}}")
"""


@pytest.fixture
def demo(pytester):
    pytester.makeconftest('pytest_plugins = ["harness.plugin"]')
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider -p no:randomly\n")
    (pytester.path / "suites" / "demo").mkdir(parents=True)

    def write(value=1e-3, status="pass", name="test_demo.py"):
        (pytester.path / "suites" / "demo" / name).write_text(
            CHECKS.format(value=value, status=status))

    write()
    pytester.write = write
    return pytester


def _alerts(pytester, name="a.json"):
    return json.loads((pytester.path / name).read_text())


def _baseline(pytester, folder="b"):
    [path] = list((pytester.path / folder).glob("*/*/*.json"))
    return path


# ------------------------------------------------------------------- one verdict

def test_injected_fault_with_baseline_off_is_no_go(demo):
    result = demo.runpytest("--baseline", "off", "--inject-fault", "example.add_drift",
                            "--alerts", "a.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert _alerts(demo)["verdict"] == "no-go"
    result.stdout.fnmatch_lines(["VERDICT: NO-GO (1 failing check(s))", "NOT COMPARED: *"])


def test_failing_check_without_a_baseline_is_no_go(demo):
    demo.write(status="fail")
    result = demo.runpytest("--baseline-dir", "b", "--alerts", "a.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    alerts = _alerts(demo)
    assert alerts["verdict"] == "no-go" and alerts["failing"] == ["demo/metric/float32"]
    assert alerts["compared"] is False and "no baseline" in alerts["not_compared"]


def test_truncated_baseline_is_no_go_and_the_run_still_writes_results(demo):
    demo.runpytest("--baseline", "record", "--baseline-dir", "b")
    path = _baseline(demo)
    path.write_text(path.read_text()[:60])
    result = demo.runpytest("--baseline-dir", "b", "--alerts", "a.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert _alerts(demo)["verdict"] == "no-go"
    assert list((demo.path / "results").glob("*.json.gz"))


def test_a_check_failing_on_both_stacks_is_listed_as_still_failing(demo):
    demo.write(status="fail")
    demo.runpytest("--baseline", "record", "--baseline-dir", "b")
    result = demo.runpytest("--baseline-dir", "b", "--alerts", "a.json")
    alerts = _alerts(demo)
    assert alerts["verdict"] == "no-go"
    assert alerts["still_failing"] == ["demo/metric/float32"]
    result.stdout.fnmatch_lines(["*failed in the baseline too*"])
    assert "failed in the baseline too" in (demo.path / "a.md").read_text()


def test_aa_compare_is_go(demo):
    demo.runpytest("--baseline", "record", "--baseline-dir", "b")
    result = demo.runpytest("--baseline-dir", "b", "--alerts", "a.json")
    assert result.ret == pytest.ExitCode.OK
    assert _alerts(demo)["verdict"] == "go"
    result.stdout.fnmatch_lines(["VERDICT: GO", "baseline: *(same stack)"])


def test_review_exits_0_unless_fail_on_review(demo):
    demo.runpytest("--baseline", "record", "--baseline-dir", "b")
    demo.write(value=5e-3)
    assert demo.runpytest("--baseline-dir", "b").ret == pytest.ExitCode.OK
    result = demo.runpytest("--baseline-dir", "b", "--fail-on", "review")
    assert result.ret == pytest.ExitCode.TESTS_FAILED


# --------------------------------------------------------------- not compared

def test_not_compared_is_loud_and_names_what_is_stored(demo):
    demo.runpytest("--baseline", "record", "--baseline-dir", "b")
    path = _baseline(demo)
    other = path.parent.parent / "some-other-cpu"
    other.mkdir()
    path.rename(other / path.name)
    result = demo.runpytest("--baseline-dir", "b", "-q")
    result.stdout.fnmatch_lines([f"NOT COMPARED: no baseline for cpu/*/{path.stem} or an older "
                                 f"stack of it in *; stored: cpu/some-other-cpu/{path.stem}"])


def test_baseline_require_without_a_baseline_is_a_usage_error(demo):
    result = demo.runpytest("--baseline", "require", "--baseline-dir", "b")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--baseline require: NOT COMPARED: no baseline for *"])


def test_baseline_whose_fingerprint_disagrees_with_its_path_is_refused(demo):
    demo.runpytest("--baseline", "record", "--baseline-dir", "b")
    path = _baseline(demo)
    doc = json.loads(path.read_text())
    doc["fingerprint"]["stack_id"] = "torch-2.11.0"
    doc["fingerprint"]["device_type"] = "cuda"
    path.write_text(json.dumps(doc))
    result = demo.runpytest("--baseline-dir", "b", "--alerts", "a.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*fingerprint disagrees with its path: device_type 'cuda' (path "
                                 "says 'cpu'), stack_id 'torch-2.11.0' (path says *"])
    assert _alerts(demo)["verdict"] == "no-go"


def test_metric_stored_as_a_string_is_a_schema_error(demo):
    demo.runpytest("--baseline", "record", "--baseline-dir", "b")
    path = _baseline(demo)
    doc = json.loads(path.read_text())
    doc["records"]["demo/metric/float32"]["metrics"]["err"] = "0.001"
    path.write_text(json.dumps(doc))
    result = demo.runpytest("--baseline-dir", "b")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*metric err='0.001' is a string but its rule is 'lower is "
                                 "better'*"])


def test_doctor_never_says_ok_for_a_baseline_that_does_not_exist(tmp_path, capsys):
    from harness import cli

    cli.main(["doctor", "--device", "cpu", "--baseline-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "[warn] baseline: NOT COMPARED: no baseline for torch-" in out
    assert "[  ok] baseline" not in out


# ------------------------------------------------------------- nothing lost

def _pytest_proc(cwd: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_concurrent_record_runs_of_different_selections_lose_no_record(demo):
    for index in range(6):
        (demo.path / "suites" / "demo" / f"test_sel{index}.py").write_text(
            "def test_r(results):\n"
            + "".join(f"    results.record('demo/s{index}/r{k}', metrics={{'v': {k}}})\n"
                      for k in range(50)))
    procs = [_pytest_proc(demo.path, f"suites/demo/test_sel{i}.py", "--baseline", "record",
                          "--baseline-dir", "b", "-q") for i in range(6)]
    outputs = [p.communicate()[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    records = json.loads(_baseline(demo).read_text())["records"]
    assert {f"demo/s{i}/r{k}" for i in range(6) for k in range(50)} <= set(records)


def test_interrupted_record_run_leaves_the_baseline_unchanged(demo):
    demo.runpytest("--baseline", "record", "--baseline-dir", "b")
    before = _baseline(demo).read_text()
    (demo.path / "suites" / "demo" / "test_zz_interrupt.py").write_text(
        "def test_interrupt(results):\n"
        "    results.record('demo/partial', metrics={'v': 1})\n"
        "    raise KeyboardInterrupt\n")
    demo.write(value=5e-3)
    result = demo.runpytest_subprocess("--baseline", "record", "--baseline-dir", "b")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert _baseline(demo).read_text() == before
    result.stdout.fnmatch_lines(["*baseline NOT recorded: the session did not complete*"])


def test_stale_temp_files_of_a_killed_writer_are_removed(tmp_path):
    from harness import results

    target = tmp_path / "torch-2.4.0.json"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = tmp_path / f".{target.name}.{dead}.abc123.tmp"
    stale.write_text("")
    results.atomic_write_text(target, "{}")
    assert not stale.exists()
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_results_folder_keeps_the_newest_runs(demo):
    for _ in range(3):
        demo.runpytest("--baseline", "off", "--keep-results", "2")
    assert len(list((demo.path / "results").glob("*.json.gz"))) == 2


def test_killed_launchers_dist_folders_are_removed(tmp_path):
    from harness import distributed

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = tmp_path / f"harness-dist-{dead}-xyz"
    live = tmp_path / f"harness-dist-{os.getpid()}-xyz"
    stale.mkdir()
    live.mkdir()
    assert distributed.remove_stale_launch_dirs(str(tmp_path)) == [stale]
    assert live.exists() and not stale.exists()


# ------------------------------------------------------------------ bad input

def test_non_utf8_baseline_is_an_error_naming_the_file_and_results_are_written(demo):
    demo.runpytest("--baseline", "record", "--baseline-dir", "b")
    path = _baseline(demo)
    path.write_bytes(path.read_bytes()[:30] + b"\xff\xfe" + path.read_bytes()[30:])
    result = demo.runpytest("--baseline-dir", "b")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*{path}:3: not UTF-8 text (byte 0xff at offset 30)*"])
    assert "INTERNALERROR" not in result.stdout.str()
    assert list((demo.path / "results").glob("*.json.gz"))


def test_unwritable_alerts_path_is_refused_before_the_run(demo):
    """Note [Outputs never overwrite inputs]: checked before the first test, not after."""
    (demo.path / "ro").write_text("a file, not a folder")
    result = demo.runpytest("--baseline", "off", "--alerts", "ro/a.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--alerts */ro/a.json: */ro is not a folder*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert not (demo.path / "results").exists()


def test_alerts_path_ending_in_md_gets_json_beside_it(demo):
    demo.runpytest("--baseline", "off", "--alerts", "x.md")
    assert json.loads((demo.path / "x.json").read_text())["verdict"] == "go"
    assert (demo.path / "x.md").read_text().startswith("# Conformance run: GO")


@pytest.mark.parametrize("args,message", [
    (["--inject-fault", ":X"], "*expected package.module:NAME with both parts*"),
    (["--inject-fault", "brokenfaults:X"], "*importing 'brokenfaults' raised RuntimeError: boom*"),
    (["--hypothesis-profile", "bogus"], "*'bogus' is not a registered profile*"),
    (["--keep-results", "-1"], "*'-1' must be >= 0*"),
    (["--fail-on", "go"], "*invalid choice: 'go'*"),
])
def test_bad_input_is_a_usage_error_naming_cause_and_fix(demo, args, message):
    demo.makepyfile(brokenfaults="raise RuntimeError('boom')\n")
    demo.syspathinsert()
    result = demo.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("args,message", [
    (["--batch-size", "0"], "*--batch-size: '0' must be >= 1*"),
    (["--rel", "-1"], "*--rel: '-1' must be > 0*"),
])
def test_localize_refuses_bad_numbers(args, message, capsys):
    from harness.training import localize

    with pytest.raises(SystemExit) as exc:
        localize.main(["--model", "tinycnn", *args])
    assert exc.value.code == 2
    assert any(__import__("fnmatch").fnmatch(line, message)
               for line in capsys.readouterr().err.splitlines())


def test_baseline_list_lists_every_file_and_marks_the_bad_ones(demo, capsys):
    from harness import cli

    demo.runpytest("--baseline", "record", "--baseline-dir", "b")
    good = _baseline(demo)
    (good.parent / "torch-9.9.9.json").write_bytes(b"\xff not json")
    assert cli.main(["baseline", "list", "--dir", str(demo.path / "b")]) == 1
    out = capsys.readouterr().out
    assert f"{good.stem}" in out and "records" in out
    assert "torch-9.9.9          BAD: " in out or "torch-9.9.9 BAD" in " ".join(out.split())
    assert "1 of 2 baseline file(s) are unusable" in out


def test_two_record_threads_in_one_process_merge_under_the_lock(tmp_path, fingerprint):
    from harness import baselines
    from harness.results import Record, RunResults

    def run(index):
        records = {f"ops/t{index}/{k}": Record(f"ops/t{index}/{k}") for k in range(20)}
        fp = {**fingerprint}
        baselines.record(tmp_path, RunResults(fp, records))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stored = baselines.select(tmp_path, fingerprint).results
    assert stored is not None and len(stored.records) == 80
