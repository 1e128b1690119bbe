"""The recorder and one check's end, with plain values (no pytester)."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import checkrun
from harness.baselines import Selection
from harness.device import Unsupported
from harness.recorder import Recorder, auto_record_id, seed_for, suite_area
from harness.results import Record, RunResults, lower
from harness.session import RunState, Settings
from harness.verdict import judge

NODE = "suites/ops/test_x.py::test_y[float16]"
CPU = SimpleNamespace(type="cpu", index=0)


def _recorder(seed=5):
    return Recorder(NODE, CPU, Settings(seed=seed), seed=seed_for(seed, NODE))


def _state(baseline=None, fail_on="no-go"):
    selection = None
    if baseline is not None:
        base = RunResults(fingerprint={})
        for rec in baseline:
            base.add(rec)
        selection = Selection(Path("b/torch-2.4.0.json"), "same stack", base)
    return RunState(Settings(seed=5, fail_on=fail_on), CPU, [], RunResults(fingerprint={}),
                    selection, controller=True)


def test_check_failing_records_fail_with_the_message_and_the_reproduce_line():
    rec = _recorder().check("ops/x/float16", False, "3 of 8 elements differ",
                            metrics={"bad": 3}, rules={"bad": lower()}, info={"k": 1})
    assert rec.status == "fail" and rec.metrics == {"bad": 3} and rec.info == {"k": 1}
    assert rec.message == ("3 of 8 elements differ\nreproduce: python -m pytest "
                           f"'{NODE}' --device cpu --seed 5 --baseline-dir='baselines'")


def test_the_reproduce_line_keeps_the_faults_and_the_baseline_store():
    """A fault run's line reruns red: the faults and the store it compared with go along."""
    settings = Settings(seed=5, faults=("example.relu_leaks",), baseline_dir=Path("/tmp/B"))
    rec = Recorder(NODE, CPU, settings, seed=5).check("example/x", False, "leaks")
    assert rec.message.endswith("--seed 5 --inject-fault 'example.relu_leaks' "
                                "--baseline-dir='/tmp/B'")


def test_check_passing_records_pass_without_a_message():
    rec = _recorder().check("ops/x/float16", True, "3 of 8 elements differ")
    assert (rec.status, rec.message) == ("pass", "")


def test_outcome_adds_the_reproduce_line_and_its_narrowing_options_to_any_status_but_pass():
    recorder = _recorder()
    rec = recorder.outcome("ops/x/a", "error", "boom", reproduce_args="--op-filter '^x$'")
    assert rec.message.endswith("--baseline-dir='baselines' --op-filter '^x$'")
    assert rec.status == "error"
    assert recorder.outcome("ops/x/b", "pass", "ignored").message == ""


def test_record_refuses_the_same_id_twice():
    recorder = _recorder()
    recorder.check("ops/x/a", True)
    with pytest.raises(ValueError, match="recorded twice"):
        recorder.check("ops/x/a", True)


def test_ids_seeds_and_areas_come_from_the_node_id():
    assert auto_record_id("suites/norm/test_bn.py::TestX::test_y[fp16]") == \
        "norm/test_bn/TestX/test_y[fp16]"
    assert seed_for(3, "a") == seed_for(3, "a") != seed_for(3, "b")
    root = Path("/r")
    assert suite_area(root / "suites/ops/test_x.py", root) == "ops"
    assert suite_area(root / "tests/test_x.py", root) is None


def test_a_test_without_records_gets_an_automatic_one_with_its_status():
    end = checkrun.conclude_check(NODE, [], None, outcome="failed", when="call",
                                  wasxfail=None, state=_state())
    assert [(r.id, r.status) for r in end.records] == [("ops/test_x/test_y[float16]", "fail")]
    assert end.failures == [] and end.skip is None


def test_a_failing_record_fails_a_passing_report_with_its_message():
    rec = Record("ops/x/a", status="fail", message="too far", test=NODE)
    end = checkrun.conclude_check(NODE, [rec], None, outcome="passed", when="call",
                                  wasxfail=None, state=_state())
    assert end.failures == ["ops/x/a: too far"]


def test_unsupported_skips_the_report_and_records_the_reason():
    end = checkrun.conclude_check(NODE, [], Unsupported("torch 2.1 has no rms_norm"),
                                  outcome="failed", when="call", wasxfail=None, state=_state())
    assert end.skip == "unsupported: torch 2.1 has no rms_norm"
    [rec] = end.records
    assert rec.status == "unsupported" and rec.info == {"reason": "torch 2.1 has no rms_norm",
                                                        "device_index": 0}


def test_a_known_failure_tags_every_record():
    end = checkrun.conclude_check(NODE, [Record("ops/x/a", status="fail", test=NODE)], None,
                                  outcome="skipped", when="call", wasxfail="vendor#1",
                                  state=_state())
    assert end.records[0].info["known_failure"] == "vendor#1" and end.failures == []


@pytest.mark.parametrize("fail_on,fails", [("no-go", False), ("review", True)])
def test_metric_drift_fails_the_check_only_with_fail_on_review(fail_on, fails):
    base = Record("ops/x/a", metrics={"err": 1e-3}, rules={"err": lower(rel=2.0)}, test=NODE)
    now = Record("ops/x/a", metrics={"err": 5e-3}, rules={"err": lower(rel=2.0)}, test=NODE)
    end = checkrun.conclude_check(NODE, [now], None, outcome="passed", when="call",
                                  wasxfail=None, state=_state([base], fail_on=fail_on))
    assert [f.kind for f in end.findings] == ["review"]
    assert bool(end.failures) == fails
    if fails:
        assert f"reproduce: python -m pytest '{NODE}' --device cpu --seed 5" in end.failures[0]


def test_collect_rebuilds_the_records_from_the_payload():
    base = Record("ops/x/a", metrics={"err": 1e-3}, rules={"err": lower(rel=2.0)}, test=NODE)
    now = Record("ops/x/a", metrics={"err": 5e-3}, rules={"err": lower(rel=2.0)}, test=NODE)
    worker = _state([base])
    end = checkrun.conclude_check(NODE, [now], None, outcome="passed", when="call",
                                  wasxfail=None, state=worker)
    controller = _state()
    checkrun.collect(controller, NODE, "call", "passed", [end.payload()])
    assert controller.run.outcomes == {NODE: "passed"}
    assert controller.run.records["ops/x/a"].metrics == {"err": 5e-3}
    # the run's findings are the judgement's over the collected records: the same ones
    assert judge(controller.run, worker.selection.results,
                 baseline_name="torch-2.4.0").findings == end.findings


@pytest.mark.parametrize("error,outcome,status", [
    (Unsupported("no batch_norm kernel"), "failed", "unsupported"),
    (RuntimeError("boom"), "failed", "fail"),
    (None, "skipped", "skip"),
])
def test_a_check_stopped_before_it_records_marks_its_baseline_ids(error, outcome, status):
    """Note [Same ids whatever the outcome]: the baseline's ids of this node, not an
    automatic one, so pass -> unsupported/fail is a regression of each of them."""
    base = [Record("ops/x/a", test=NODE), Record("ops/x/b", test=NODE),
            Record("ops/other/c", test="suites/ops/test_x.py::test_z")]
    end = checkrun.conclude_check(NODE, [Record("ops/x/a", test=NODE)] if status == "fail"
                                  else [], error, outcome=outcome, when="call", wasxfail=None,
                                  state=_state(base))
    want = [("ops/x/a", "pass"), ("ops/x/b", status)] if status == "fail" else \
        [("ops/x/a", status), ("ops/x/b", status)]
    assert [(r.id, r.status) for r in end.records] == want
    lost = [f.record_id for f in end.findings if f.kind == "regression"]
    assert lost == ([] if status == "skip" else [rid for rid, s in want if s != "pass"])


def test_a_record_id_two_tests_record_is_an_error_naming_both():
    state = _state()
    for node in ("suites/a.py::test_one", "suites/b.py::test_two"):
        end = checkrun.conclude_check(node, [Record("ops/x/same", test=node)], None,
                                      outcome="passed", when="call", wasxfail=None, state=state)
        checkrun.collect(state, node, "call", "passed", [end.payload()])
    [error] = state.errors
    assert "ops/x/same" in error and "suites/a.py::test_one" in error \
        and "suites/b.py::test_two" in error
    assert judge(state.run, None, errors=state.errors).level == "NO-GO"


@pytest.mark.parametrize("bad, problem", [
    ("ops", "needs at least"), ("ops//float32", "empty part"), ("ops/exp/", "empty part"),
    ("/ops/exp", "empty part"), (" ops/exp", "surrounding spaces"),
    ("ops /exp", "surrounding spaces"), ("ops/ exp", "surrounding spaces"),
    ("ops/exp\u00a0", "surrounding spaces"), ("ops/exp\n", "surrounding spaces"),
    ("ops/e\x01xp", "control character")])
def test_a_malformed_record_id_is_refused_where_it_is_recorded(bad, problem):
    from harness import ids

    with pytest.raises(ValueError, match=f"{problem}.*harness/ids.py"):
        ids.check(bad)
    assert ids.check("ops/exp/float16/fwd/s=(128,257)") == "ops/exp/float16/fwd/s=(128,257)"


def test_ids_record_builds_the_id_every_suite_records_under():
    from harness import ids

    assert ids.record("norm", "batchnorm2d", "float32", "momentum=0.1") == \
        "norm/batchnorm2d/float32/momentum=0.1"
    with pytest.raises(ValueError, match="empty part"):
        ids.record("norm", "", "float32")


def test_every_record_names_the_device_index_it_ran_on():
    """Note [One device per xdist worker]: the records a test made, and the ones the end
    of the test adds (ids its baseline holds that it did not reach), name the device."""
    state = _state(baseline=[Record("ops/x/b", test=NODE)])
    state.device = SimpleNamespace(type="npu", index=1)
    recorder = _recorder()
    recorder.context["rank_devices"] = ["npu:0", "npu:1"]
    recorder.record("ops/x/a", info={"note": "mine"})
    end = checkrun.conclude_check(NODE, recorder.records, RuntimeError("stopped"),
                                  outcome="failed", when="call", wasxfail=None, state=state)
    assert {r.id: r.info for r in end.records} == {
        "ops/x/a": {"rank_devices": ["npu:0", "npu:1"], "note": "mine", "device_index": 1},
        "ops/x/b": {"device_index": 1}}
