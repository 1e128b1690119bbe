import json
import subprocess
import sys
import textwrap

import pytest

from harness import results
from harness.results import Record, RunResults, SchemaError


def _run(fingerprint, **records):
    return RunResults(fingerprint, {rid: Record(rid, **kw) for rid, kw in records.items()})


def test_round_trip_keeps_records_rules_and_info(tmp_path, fingerprint):
    run = _run(fingerprint, **{"ops/exp/float16/fwd": dict(
        metrics={"max_rel_err": 4.9e-4, "cosine": 1.0},
        rules={"max_rel_err": results.lower(2.0, 1e-6)}, info={"curve": [1, 2]})})
    path = results.write(run, tmp_path / "r.json")
    loaded = results.load(path)
    rec = loaded.records["ops/exp/float16/fwd"]
    assert rec.metrics == {"max_rel_err": 4.9e-4, "cosine": 1.0}
    assert rec.rules["max_rel_err"] == results.lower(2.0, 1e-6)
    assert rec.info == {"curve": [1, 2]} and rec.suite == "ops"


def test_non_finite_metrics_stay_valid_json(tmp_path, fingerprint):
    run = _run(fingerprint, **{"ops/a": dict(metrics={"err": float("inf")})})
    text = results.dumps(run)
    assert json.loads(text)["records"]["ops/a"]["metrics"]["err"] == "inf"


@pytest.mark.parametrize("bad", [
    dict(status="great"), dict(rules={"x": {"better": "lower"}}),
    dict(metrics={"x": 1.0}, rules={"x": {"better": "sideways"}}),
    dict(metrics={"x": 1.0}, rules={"x": {"better": "lower", "rel": 0.5}}),
    dict(metrics={"x": [1, 2]}),
])
def test_invalid_records_are_rejected(bad):
    with pytest.raises(SchemaError):
        Record("ops/a", **bad)


def test_truncated_file_error_names_file_and_line(tmp_path, fingerprint):
    path = results.write(_run(fingerprint, **{"ops/a": {}}), tmp_path / "b.json")
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(SchemaError) as info:
        results.load(path)
    message = str(info.value)
    assert str(path) in message and "not valid JSON" in message
    assert f"{path}:" in message and "truncated" in message


def test_foreign_schema_is_a_clear_error(tmp_path):
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"schema_version": 7, "records": {}}))
    with pytest.raises(SchemaError, match="schema_version is 7"):
        results.load(path)
    path.write_text(json.dumps({"benchmarks": []}))
    with pytest.raises(SchemaError, match="not a harness results file"):
        results.load(path)


def test_failed_write_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "base.json"
    target.write_text("old")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(results.os, "replace", broken_replace)
    with pytest.raises(OSError):
        results.atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["base.json"]


def test_write_killed_midway_leaves_old_file_intact(tmp_path):
    target = tmp_path / "base.json"
    target.write_text('{"old": true}')
    script = textwrap.dedent(f"""
        import os, signal
        from harness import results
        os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # die mid-write
        results.atomic_write_text({str(target)!r}, '{{"new": ' + '1' * 100000)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == -9
    assert json.loads(target.read_text()) == {"old": True}
