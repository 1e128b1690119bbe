import pytest

from harness import baselines, results
from harness.results import Record, RunResults


def _store(root, fingerprint, stack_id, *records):
    fp = dict(fingerprint, stack_id=stack_id)
    run = RunResults(fp, {r.id: r for r in records})
    results.write(run, baselines.path_for(root, fp))


@pytest.fixture
def npu_fp():
    return {"device_type": "npu", "device_name": "Ascend910B3", "device_slug": "ascend910b3",
            "stack_id": "cann-8.0.0", "torch": "2.4.0"}


def test_same_stack_is_preferred(tmp_path, npu_fp):
    for stack in ("cann-8.0.RC3", "cann-8.0.0"):
        _store(tmp_path, npu_fp, stack, Record("ops/a"))
    chosen = baselines.select(tmp_path, npu_fp)
    assert chosen.stack_id == "cann-8.0.0" and "same stack" in chosen.reason


def test_upgrade_compares_with_newest_older_stack(tmp_path, npu_fp):
    for stack in ("cann-7.0.0", "cann-8.0.RC3", "cann-8.0.RC2", "cann-8.1.RC1"):
        _store(tmp_path, npu_fp, stack, Record("ops/a"))
    chosen = baselines.select(tmp_path, npu_fp)  # current: cann-8.0.0
    assert chosen.stack_id == "cann-8.0.RC3"
    assert "upgrade" in chosen.reason and chosen.results is not None


def test_against_names_a_stack_and_missing_one_is_an_error(tmp_path, npu_fp):
    _store(tmp_path, npu_fp, "cann-7.0.0", Record("ops/a"))
    assert baselines.select(tmp_path, npu_fp, against="cann-7.0.0").stack_id == "cann-7.0.0"
    missing = baselines.select(tmp_path, npu_fp, against="cann-6.0.0")
    assert missing.error and "cann-7.0.0" in missing.error


def test_missing_baseline_is_a_note_not_an_error(tmp_path, npu_fp):
    _store(tmp_path, npu_fp, "cann-9.0.0", Record("ops/a"))  # only a newer stack
    chosen = baselines.select(tmp_path, npu_fp)
    assert chosen.path is None and chosen.error is None and "record one" in chosen.reason


def test_corrupt_baseline_is_reported_with_its_file(tmp_path, npu_fp):
    path = baselines.path_for(tmp_path, npu_fp)
    path.parent.mkdir(parents=True)
    path.write_text('{"schema_version": 1,\n "records": {')
    chosen = baselines.select(tmp_path, npu_fp)
    assert chosen.results is None and str(path) in chosen.error and ":2:" in chosen.error


def test_record_merges_into_same_stack(tmp_path, npu_fp):
    _store(tmp_path, npu_fp, "cann-8.0.0", Record("ops/a"), Record("amp/b"))
    run = RunResults(npu_fp, {"ops/a": Record("ops/a", status="fail")})
    path = baselines.record(tmp_path, run)
    stored = results.load(path).records
    assert stored["ops/a"].status == "fail" and "amp/b" in stored


def test_record_refuses_to_overwrite_another_stack(tmp_path, npu_fp):
    path = baselines.path_for(tmp_path, npu_fp)
    _store(tmp_path, npu_fp, "cann-7.0.0", Record("ops/a"))
    baselines.path_for(tmp_path, dict(npu_fp, stack_id="cann-7.0.0")).rename(path)
    with pytest.raises(baselines.BaselineError, match="refusing to overwrite"):
        baselines.record(tmp_path, RunResults(npu_fp, {"ops/a": Record("ops/a")}))
    assert results.load(path).fingerprint["stack_id"] == "cann-7.0.0"
