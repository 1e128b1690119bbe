"""One judgement (harness.verdict.judge): every view of one run gives the same verdict,
a lost capability is NO-GO and named, nothing checked is never GO, and only honest runs
become baselines or history (issue 21, items 1-4)."""

import json
import os
import re
import sys
from pathlib import Path

import early
import pytest

from harness import cli, known_failures, results
from harness.known_failures import KnownFailure
from harness.verdict import judge

CHECKS = """
import torch

def test_metric(device, results):
    results.record("demo/metric/float32", status={status!r}, metrics={{"err": 1e-3}},
                   message="err too large")

def test_add(device, results):
    a = torch.linspace(1, 2, 64)
    with device.scope():
        dut = a + a
    err = float(((dut.double() - 2 * a.double()).abs() / (2 * a.double())).max())
    results.check("demo/add/float32", err < 1e-6, f"add max_rel_err {{err:.3g}}",
                  metrics={{"max_rel_err": err}})
"""

INTERRUPT = """
def test_zz_interrupt(results):
    results.record("demo/partial", metrics={"v": 1})
    raise KeyboardInterrupt
"""


@pytest.fixture
def demo(pytester, monkeypatch):
    pytester.makeconftest('pytest_plugins = ["harness.plugin"]')
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider -p no:randomly\n")
    (pytester.path / "suites" / "demo").mkdir(parents=True)

    def write(status="pass"):
        (pytester.path / "suites" / "demo" / "test_demo.py").write_text(
            CHECKS.format(status=status))

    write()
    pytester.write = write
    monkeypatch.chdir(pytester.path)
    return pytester


ROOT = Path(__file__).resolve().parents[1]


def _newest_results(path):
    return sorted((path / "results").glob("*.json.gz"))[-1]


def _baseline(path):
    [stored] = list((path / "b").glob("*/*/*.json"))
    return stored


def _views(demo, result, capsys):
    """The verdict of each view of the run just made: terminal, exit code, alerts JSON and
    Markdown, report HTML and Markdown, ``harness report`` and ``baseline diff``."""
    terminal = re.search(r"^VERDICT: (\S+)", result.stdout.str(), re.M).group(1)
    alerts = json.loads((demo.path / "a.json").read_text())["verdict"].upper()
    alerts_md = re.search(r"^# Conformance run: (\S+)", (demo.path / "a.md").read_text(),
                          re.M).group(1)
    html = re.search(r'class="verdict ([A-Z-]+)"', (demo.path / "r.html").read_text()).group(1)
    report_md = re.search(r"^# VERDICT: (\S+)", (demo.path / "r.report.md").read_text()
                          if (demo.path / "r.report.md").exists()
                          else (demo.path / "r.md").read_text(), re.M).group(1)
    stored = _newest_results(demo.path)
    capsys.readouterr()
    rc_report = cli.main(["report", str(stored), "--against", str(_baseline(demo.path))])
    cli_report = re.search(r"^VERDICT: (\S+)", capsys.readouterr().out, re.M).group(1)
    rc_diff = cli.main(["baseline", "diff", str(_baseline(demo.path)), str(stored)])
    cli_diff = re.search(r"^VERDICT: (\S+)", capsys.readouterr().out, re.M).group(1)
    return {"terminal": terminal, "exit": "NO-GO" if result.ret else "GO",
            "alerts.json": alerts, "alerts.md": alerts_md, "report.html": html,
            "report.md": report_md, "harness report": cli_report,
            "harness report rc": "NO-GO" if rc_report else "GO", "baseline diff": cli_diff,
            "baseline diff rc": "NO-GO" if rc_diff else "GO"}


ARGS = ("--baseline-dir", "b", "--alerts", "a.json", "--report", "r.html")


def test_a_clean_run_is_go_in_every_view(demo, capsys):
    demo.runpytest("--baseline", "record", "--baseline-dir", "b").assert_outcomes(passed=2)
    views = _views(demo, demo.runpytest(*ARGS), capsys)
    assert set(views.values()) == {"GO"}, views


def test_a_known_failure_night_is_go_in_every_view(demo, capsys, monkeypatch):
    demo.runpytest("--baseline", "record", "--baseline-dir", "b").assert_outcomes(passed=2)
    demo.write(status="fail")
    monkeypatch.setattr(known_failures, "KNOWN_FAILURES", (KnownFailure(
        "cpu", "torch-*", "suites/demo/test_demo.py::test_metric", "a known bug", "https://example.org/issues/1"),))
    result = demo.runpytest(*ARGS)
    result.assert_outcomes(passed=1, xfailed=1)
    views = _views(demo, result, capsys)
    assert set(views.values()) == {"GO"}, views
    alerts = json.loads((demo.path / "a.json").read_text())
    assert alerts["known_failures"] == ["demo/metric/float32"]


def test_a_known_failures_passing_records_are_not_listed_as_known_failures(demo, capsys,
                                                                           monkeypatch):
    """The listed test records a second value that passes: only the failing record is a
    known failure (alerts, counts line), the passing one is counted as a pass."""
    def write(status):
        (demo.path / "suites" / "demo" / "test_demo.py").write_text(
            CHECKS.format(status=status).replace(
                'message="err too large")',
                'message="err too large")\n    results.record("demo/metric/dtypes", '
                'metrics={"n": 1})'))

    write("pass")
    demo.runpytest("--baseline", "record", "--baseline-dir", "b").assert_outcomes(passed=2)
    write("fail")
    monkeypatch.setattr(known_failures, "KNOWN_FAILURES", (KnownFailure(
        "cpu", "torch-*", "suites/demo/test_demo.py::test_metric", "a known bug", "https://example.org/issues/1"),))
    result = demo.runpytest(*ARGS)
    result.assert_outcomes(passed=1, xfailed=1)
    assert set(_views(demo, result, capsys).values()) == {"GO"}
    alerts = json.loads((demo.path / "a.json").read_text())
    assert alerts["known_failures"] == ["demo/metric/float32"]
    assert alerts["counts"]["known_failures"] == 1
    result.stdout.fnmatch_lines(["  demo: 3 records (2 pass, 1 xfail)",
                                 "1 group(s) to look at, worst first:",
                                 "  [[]fails its standard[]] demo/metric/float32: fail KNOWN FAILURE"])
    report_md = (demo.path / "r.md").read_text()
    header, row = (line for line in report_md.splitlines()
                   if line.startswith(("| suite |", "| demo |")))
    cells = dict(zip(header.split("|"), row.split("|")))
    assert [cells[f" {k} "] for k in ("records", "pass", "fail", "xfail")] == [
        " 3 ", " 2 ", "  ", " 1 "]


def test_an_interrupted_run_is_no_go_in_every_view(demo, capsys):
    demo.runpytest("--baseline", "record", "--baseline-dir", "b").assert_outcomes(passed=2)
    (demo.path / "suites" / "demo" / "test_zz.py").write_text(INTERRUPT)
    result = demo.runpytest_subprocess(*ARGS)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    views = _views(demo, result, capsys)
    assert set(views.values()) == {"NO-GO"}, views
    assert not results.load(_newest_results(demo.path)).complete


def test_a_faulted_run_is_no_go_in_every_view_and_says_so(demo, capsys):
    demo.runpytest("--baseline", "record", "--baseline-dir", "b").assert_outcomes(passed=2)
    result = demo.runpytest(*ARGS, "--inject-fault", "example.add_drift")
    views = _views(demo, result, capsys)
    assert set(views.values()) == {"NO-GO"}, views
    result.stdout.fnmatch_lines(["NOTE FAULTS INJECTED: example.add_drift*"])
    assert results.load(_newest_results(demo.path)).faults == ["example.add_drift"]
    assert "FAULTS INJECTED" in (demo.path / "r.html").read_text()


# ------------------------------------------------------------ only honest runs record

def test_record_with_an_injected_fault_is_refused_and_the_baseline_unchanged(demo,
                                                                              monkeypatch):
    demo.runpytest("--baseline", "record", "--baseline-dir", "b")
    before = _baseline(demo.path).read_text()
    result = demo.runpytest("--baseline", "record", "--baseline-dir", "b", "--inject-fault",
                            "example.add_drift")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--baseline record with an injected fault (example.add_drift, "
                                 "from --inject-fault)*the stored baseline is unchanged*"])
    monkeypatch.setenv("HARNESS_FAULTS", "example.add_drift")
    result = demo.runpytest("--baseline", "record", "--baseline-dir", "b")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*from HARNESS_FAULTS in the environment*"])
    assert _baseline(demo.path).read_text() == before


def test_a_faulted_or_incomplete_baseline_is_not_compared(fingerprint):
    from harness.results import Record, RunResults

    run = RunResults(fingerprint, {"demo/a": Record("demo/a")}, outcomes={"t": "passed"})
    faulted = RunResults(fingerprint, {"demo/a": Record("demo/a", status="fail")},
                         faults=["example.add_drift"])
    judged = judge(run, faulted)
    assert not judged.compared and "fault-injected (example.add_drift)" in judged.not_compared
    partial = RunResults(fingerprint, {"demo/a": Record("demo/a")}, complete=False)
    assert "did not complete" in judge(run, partial).not_compared


def test_a_comparison_across_seeds_says_so_in_the_header_and_the_report(demo):
    demo.runpytest("--baseline", "record", "--baseline-dir", "b", "--seed", "7")
    result = demo.runpytest(*ARGS)
    result.stdout.fnmatch_lines(["harness: NOTE different seeds: this run 0, the baseline 7*",
                                 "NOTE different seeds: this run 0, the baseline 7*"])
    assert "different seeds: this run 0, the baseline 7" in (demo.path / "r.html").read_text()


def test_history_leaves_out_fault_injected_and_incomplete_runs(demo, capsys):
    from harness.bench import history

    demo.runpytest("--baseline-dir", "b")
    demo.runpytest("--baseline-dir", "b", "--inject-fault", "example.add_drift")
    runs, what = history.load_runs(demo.path / "results")
    assert len(runs) == 1 and "left out 1 fault-injected run(s)" in what


# ----------------------------------------------------------------- nothing checked

def test_a_run_whose_every_check_skipped_is_nothing_checked_and_fails(demo):
    (demo.path / "suites" / "demo" / "test_demo.py").write_text(
        "import pytest\n\ndef test_a(results):\n    pytest.skip('no such feature here')\n")
    result = demo.runpytest("--baseline", "off", "--alerts", "a.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["VERDICT: NO-GO (NOTHING CHECKED: all 1 record(s) skipped*"])
    assert json.loads((demo.path / "a.json").read_text())["nothing_checked"] is True


# ------------------------------------------------- lost capabilities (upgrade direction)

USER_FAULT = '''
from harness.faults import patch_attr


def _dropped(original):
    def batch_norm(*args, **kwargs):
        raise RuntimeError("\\"batch_norm_cpu\\" not implemented for 'Float'")
    return batch_norm


BN_DROPPED = patch_attr("user.bn_dropped", family="user",
                        description="batch_norm has no float32 kernel (an upgrade dropped it)",
                        target="torch.nn.functional.batch_norm", replace=_dropped,
                        checks=("suites/norm/test_batchnorm.py",))
'''


def _batch_norm_dropped(env: dict, tmp_path: Path) -> dict:
    """Record suites/norm/test_batchnorm.py, then run it with batch_norm raising "not
    implemented for 'Float'" (a user fault standing for the new stack): the baseline's
    records, the second run and its report page."""
    (tmp_path / "userfaults.py").write_text(USER_FAULT)
    env = {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    env.pop("HARNESS_FAULTS", None)
    common = [sys.executable, "-m", "pytest", "suites/norm/test_batchnorm.py", "-p",
              "no:randomly", "-p", "no:cacheprovider", "--baseline-dir", str(tmp_path / "b"),
              "--results-dir", str(tmp_path / "results")]
    recorded = early.run([*common, "--baseline", "record"], cwd=ROOT, env=env, timeout=600)
    assert recorded.returncode == 0, recorded.stdout[-3000:] + recorded.stderr[-2000:]
    base = results.load(_baseline(tmp_path))
    run = early.run([*common, "--inject-fault", "userfaults:BN_DROPPED", "--report",
                     str(tmp_path / "r.html")], cwd=ROOT, env=env, timeout=600)
    page = tmp_path / "r.html"  # a run that failed early wrote none: its output says why
    return {"base": base, "run": run, "page": page.read_text() if page.exists() else ""}


BN_DROPPED = early.in_temp_dir("judgement: a kernel the upgrade dropped", _batch_norm_dropped)


def test_a_kernel_the_upgrade_dropped_is_no_go_naming_each_lost_capability():
    """Each record the baseline holds goes pass -> unsupported, named in the terminal and
    the report; NO-GO, rc 1 (an early job: Note [Early jobs] in tests/early.py)."""
    got = early.result(BN_DROPPED)
    base, run, page = got["base"], got["run"], got["page"]
    assert base.records and {r.status for r in base.records.values()} == {"pass"}
    assert run.returncode == 1, run.stdout[-3000:]
    assert re.search(r"^VERDICT: NO-GO \(.*\b" + str(len(base.records))
                     + r" capability\(ies\) lost", run.stdout, re.M), run.stdout[-3000:]
    for rid in base.records:
        line = f"{rid}: pass -> unsupported (RuntimeError: \"batch_norm_cpu\" not implemented"
        assert f"  {line}" in run.stdout
        assert rid in page
    assert " new," in run.stdout and " 0 new, 0 lost" in run.stdout


ERRORS_LATER = """
def test_two(results):
    if {broken}:
        raise RuntimeError("the new stack's kernel crashed")
    results.record("demo/two/a", metrics={{"v": 1.0}})
    results.record("demo/two/b", metrics={{"v": 2.0}})
"""


@pytest.mark.parametrize("error", ["RuntimeError(\"the new stack's kernel crashed\")",
                                   "AssertionError('wrong before recording')"])
def test_a_check_that_errors_before_it_records_loses_each_of_its_records(demo, error):
    path = demo.path / "suites" / "demo" / "test_demo.py"
    path.write_text(ERRORS_LATER.format(broken=False))
    demo.runpytest("--baseline", "record", "--baseline-dir", "b").assert_outcomes(passed=1)
    path.write_text(ERRORS_LATER.format(broken=True).replace(
        "RuntimeError(\"the new stack's kernel crashed\")", error))
    result = demo.runpytest(*ARGS)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["VERDICT: NO-GO (*2 capability(ies) lost)",
                                 "LOST (2): *", "  demo/two/a: pass -> fail *",
                                 "  demo/two/b: pass -> fail *",
                                 "*0 new, 0 lost, 0 not-run"])
    assert "demo/two/a: pass -&gt; fail" in (demo.path / "r.html").read_text()


def test_an_op_filter_that_matches_no_op_case_is_a_usage_error(demo):
    result = demo.runpytest("--op-filter", "zzzz")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--op-filter 'zzzz' matches no op case*exp-float16-fwd-odd257*"])


def test_an_op_filter_deselects_cases_as_not_run_never_lost(fingerprint):
    from harness.results import Record, RunResults

    node = "suites/ops/test_catalog.py::test_op[exp-float32]"
    base = RunResults(fingerprint, {rid: Record(rid, test=node) for rid in (
        "ops/exp/float32/fwd/typical", "ops/exp/float32/bwd/typical")})
    run = RunResults(fingerprint, {"ops/exp/float32/fwd/typical": Record(
        "ops/exp/float32/fwd/typical", test=node)}, outcomes={node: "passed"},
        selection={"op_filter": "fwd"})
    judged = judge(run, base)
    assert judged.level == "GO" and [f.kind for f in judged.findings] == ["not-run"]
    run.selection = {}
    assert judge(run, base).level == "NO-GO"  # the same record, its case selected: lost


def test_a_model_check_on_empty_inputs_is_nothing_checked_and_exits_1(capsys):
    import argparse

    from harness.model import check as model_check
    from harness.model.options import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["harness.models:simplecnn", "--input", "0x3x32x32",
                              "--device", "cpu"])
    assert model_check.main(args) == 1
    out = capsys.readouterr().out
    assert re.search(r"^verdict: NO-GO \(NOTHING CHECKED: all \d+ record\(s\) skipped, e.g. "
                     r"input 0 has shape 0x3x32x32", out, re.M), out[-2000:]


def _model_on_empty_inputs(env: dict, tmp_path: Path):
    return early.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "suites/model", "--model", "harness.models:simplecnn", "--model-input", "0x3x32x32",
         f"--results-dir={tmp_path}"], cwd=ROOT, env=env, timeout=600)


MODEL_ON_EMPTY_INPUTS = early.in_temp_dir("judgement: pytest --model on empty inputs",
                                          _model_on_empty_inputs)


def test_pytest_model_on_empty_inputs_is_nothing_checked_too():
    """``pytest --model ... --model-input 0x...`` follows the model command's rule
    (harness.model.spec.empty_inputs): every case and the inventory skip, NO-GO."""
    run = early.result(MODEL_ON_EMPTY_INPUTS)
    assert run.returncode == 1, run.stdout[-2000:]
    assert re.search(r"^VERDICT: NO-GO \(NOTHING CHECKED: all \d+ record\(s\) skipped, e.g. "
                     r"input 0 has shape 0x3x32x32", run.stdout, re.M), run.stdout[-2000:]
    assert " passed" not in run.stdout.splitlines()[-1]


EARLY = (BN_DROPPED, MODEL_ON_EMPTY_INPUTS)
