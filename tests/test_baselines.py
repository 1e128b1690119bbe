import json
from pathlib import Path

import pytest

from harness import baselines, results
from harness import stack as stacks
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


# ------------------------------------------------------------ the committed baselines

COMMITTED = sorted((Path(__file__).resolve().parents[1] / "baselines").glob("*/*/*.json"))


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_committed_baseline_is_a_whole_default_run_of_this_format(path):
    """A committed baseline is what a fresh clone's first command compares with: it is
    filed under its own device and stack, in this harness's format, and records the whole
    default selection (``-m npu``). One recorded by an older harness (its format 1, before
    the records said which selection made them) compared its DUT errors as another
    harness measured them: a fresh clone's first command on that CPU said REVIEW (15
    metrics of prod's backward, the same stack) and 5,044 records new."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert raw["schema_version"] == results.SCHEMA_VERSION, (
        f"{path} was written in format {raw['schema_version']}; record it again on that "
        f"CPU: python -m pytest -m npu --baseline record")
    fingerprint = raw["fingerprint"]
    assert path.parent.parent.name == fingerprint["device_type"]
    assert path.parent.name == fingerprint["device_slug"] == stacks.device_slug(fingerprint)
    assert path.stem == fingerprint["stack_id"] == stacks.stack_id(fingerprint)
    assert raw["selection"]["markexpr"] == "npu", raw["selection"]


def test_every_cpu_we_measured_on_has_a_committed_baseline():
    """The CPUs named in README's paragraph on committed baselines have one each (the
    check above would pass on an empty folder)."""
    slugs = {p.parent.name for p in COMMITTED}
    assert {"x86-64-amd-f25m1-avx2-mkl-t2", "x86-64-amd-f25m17-avx512-mkl-t2",
            "x86-64-amd-f26m2-avx512-mkl-t2", "x86-64-intel-f6m106-avx512-mkl-t2"} <= slugs
