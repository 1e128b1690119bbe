import pytest

from harness import regress
from harness.results import Record, RunResults, equal, higher, lower


@pytest.mark.parametrize("old,new,expected", [
    (1e-3, 1.9e-3, None),            # within the ratio
    (1e-3, 2.5e-3, "regression"),    # past ratio and floor
    (0.0, 1e-9, None),               # a 0.0 baseline: the floor absorbs noise
    (0.0, 1e-3, "regression"),
    (1e-3, 4e-4, "improvement"),
])
def test_lower_is_better_rule(old, new, expected):
    assert regress.judge(old, new, lower(rel=2.0, abs=1e-6)) == expected


def test_higher_is_better_rule():
    rule = higher(rel=1.1)
    assert regress.judge(100.0, 95.0, rule) is None
    assert regress.judge(100.0, 80.0, rule) == "regression"
    assert regress.judge(100.0, 120.0, rule) == "improvement"


def test_equal_rule_on_numbers_and_strings():
    assert regress.judge(64, 64, equal()) is None
    assert regress.judge(64, 32, equal()) == "regression"
    assert regress.judge("float32", "bfloat16", equal()) == "regression"


def test_nan_appearing_is_a_regression():
    assert regress.judge(0.5, "nan", lower()) == "regression"


def test_noise_aware_rule_ignores_changes_within_the_spread():
    rule = lower(rel=1.05, noise=3.0)
    assert regress.judge(10.0, 11.0, rule, old_spread=0.5, new_spread=0.5) is None
    assert regress.judge(10.0, 14.0, rule, old_spread=0.5, new_spread=0.5) == "regression"


@pytest.mark.parametrize("old,new,kind", [
    ("pass", "fail", "regression"), ("pass", "error", "regression"),
    ("pass", "unsupported", "regression"), ("pass", "fallback", "regression"),
    ("fallback", "unsupported", "regression"), ("unsupported", "pass", "improvement"),
    ("pass", "skip", None), ("fail", "fail", None), ("pass", "slower", "regression"),
    ("slower", "pass", "improvement"),
])
def test_status_transitions(old, new, kind):
    found = regress.compare_record(Record("ops/x", status=new), Record("ops/x", status=old))
    assert [f.kind for f in found] == ([kind] if kind else [])


def test_compare_reports_new_lost_and_not_run(fingerprint):
    """A baseline record is *lost* when its check ran and did not record it, *not run*
    when its check was not selected or ``--op-filter`` deselected its case."""
    base = RunResults(fingerprint, {r.id: r for r in [
        Record("ops/a", test="t1"), Record("ops/b", test="t1"), Record("amp/c", test="t2"),
        Record("ops/exp/float32/fwd/x", test="t1")]})
    current = RunResults(fingerprint, {r.id: r for r in [Record("ops/a", test="t1"),
                                                          Record("ops/new", test="t1")]})
    kinds = {(f.kind, f.record_id) for f in regress.compare(
        current, base, "torch-2.4.0", ran_ids={"t1"}, op_filter="^relu")}
    assert kinds == {("new", "ops/new"), ("lost", "ops/b"), ("not-run", "amp/c"),
                     ("not-run", "ops/exp/float32/fwd/x")}


def test_a_lost_record_is_no_go_and_a_not_run_one_is_not(fingerprint):
    from harness.verdict import judge

    base = RunResults(fingerprint, {r.id: r for r in [
        Record("ops/a", test="t1"), Record("ops/b", test="t1"), Record("amp/c", test="t2")]})
    lost = RunResults(fingerprint, {"ops/a": Record("ops/a", test="t1")}, outcomes={"t1": "passed"})
    judged = judge(lost, base)
    assert judged.level == "NO-GO" and judged.lost == [
        "ops/b: recorded in the baseline, not by t1"]
    assert "1 record(s) lost" in judged.headline
    fine = RunResults(fingerprint, {"amp/c": Record("amp/c", test="t2")}, outcomes={"t2": "passed"})
    assert judge(fine, base).level == "GO"


def test_an_opt_in_check_the_baseline_skipped_loses_nothing_when_it_runs(fingerprint):
    """A baseline recorded without --run-slow holds a slow check as one ``skip`` record
    under its automatic id; run with --run-slow, the check records its own ids, and the
    skip record is not run, not lost: the run is GO (it was NO-GO, 17 records lost)."""
    from harness.ids import auto_record
    from harness.verdict import judge

    node = "suites/graph/test_graph.py::test_graphs_and_breaks[simplecnn]"
    base = RunResults(fingerprint, {r.id: r for r in [
        Record(auto_record(node), status="skip", test=node), Record("ops/a", test="t1")]})
    slow = RunResults(fingerprint, {"graph/simplecnn/graphs": Record(
        "graph/simplecnn/graphs", test=node)}, outcomes={node: "passed"})
    kinds = {(f.kind, f.record_id) for f in regress.compare(slow, base, ran_ids={node})}
    assert kinds == {("new", "graph/simplecnn/graphs"), ("not-run", auto_record(node)),
                     ("not-run", "ops/a")}
    assert judge(slow, base).level == "GO"
    ran_and_lost = RunResults(fingerprint, {"graph/simplecnn/graphs": Record(
        "graph/simplecnn/graphs", test="t1")}, outcomes={"t1": "passed"})
    assert judge(ran_and_lost, base).level == "NO-GO"  # a passing record still counts


def test_finding_message_names_record_values_rule_and_baseline():
    rule = lower(rel=2.0, abs=1e-6)
    [finding] = regress.compare_record(
        Record("ops/exp/float32/fwd", metrics={"max_rel_err": 1e-3}, rules={"max_rel_err": rule}),
        Record("ops/exp/float32/fwd", metrics={"max_rel_err": 1e-5}, rules={"max_rel_err": rule}),
        baseline="torch-2.3.0")
    assert finding.kind == "review"  # Note [Review or regression]
    for part in ("ops/exp/float32/fwd", "max_rel_err", "1e-05", "0.001", "ratio 2",
                 "torch-2.3.0"):
        assert part in finding.message


def test_alerts_are_written_as_json_and_markdown(tmp_path, fingerprint):
    import json

    from harness.verdict import judge

    rule = lower()
    base = RunResults(fingerprint, {
        "ops/a": Record("ops/a", metrics={"err": 1.0}, rules={"err": rule}),
        "ops/b": Record("ops/b", metrics={"err": 3.0}, rules={"err": rule}),
        "ops/c": Record("ops/c")})
    run = RunResults(fingerprint, {
        "ops/a": Record("ops/a", metrics={"err": 3.0}, rules={"err": rule}),
        "ops/b": Record("ops/b", metrics={"err": 1.0}, rules={"err": rule}),
        "ops/c": Record("ops/c", status="unsupported", message="no kernel")})
    judged = judge(run, base, baseline_name="b")
    paths = regress.write_alerts(tmp_path / "alerts.json", judged, {"stack_id": "torch-2.4.0"})
    doc = json.loads(paths[0].read_text())
    assert doc["verdict"] == "no-go" and doc["lost"] == ["ops/c: pass -> unsupported (no kernel)"]
    assert [r["record_id"] for r in doc["regressions"]] == ["ops/c"]
    assert [r["record_id"] for r in doc["reviews"]] == ["ops/a"]
    assert [r["record_id"] for r in doc["improvements"]] == ["ops/b"]
    markdown = paths[1].read_text()
    assert "NO-GO" in markdown and "`ops/a`" in markdown and "pass -> unsupported" in markdown


def test_a_finding_survives_its_json():
    finding = regress.Finding("review", "ops/a", "err", 1.0, 3.0, lower().to_json(), "b", "t")
    assert regress.Finding.from_json(finding.to_json()) == finding
    assert regress.Finding.from_json(regress.Finding("new", "ops/b").to_json()) == \
        regress.Finding("new", "ops/b")
