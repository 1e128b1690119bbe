import json
import subprocess
import sys
import textwrap
from pathlib import Path

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


def test_metrics_are_cleaned_the_same_on_the_fast_path_and_value_by_value():
    """A record of plain finite numbers is taken as it is (C loops); one with a non-finite
    float, a bool, a numpy scalar or an int past the float range is cleaned value by
    value: the same JSON-safe values either way."""
    import numpy as np

    plain = Record("ops/a", metrics={"x": 1.5, "n": 3})
    assert plain.metrics == {"x": 1.5, "n": 3}
    mixed = Record("ops/a", metrics={"x": 1.5, "inf": float("inf"), "nan": float("nan"),
                                     "flag": True, "np": np.float32(0.5), "big": 10**400},
                   rules={"x": results.lower()})
    assert mixed.metrics == {"x": 1.5, "inf": "inf", "nan": "nan", "flag": True, "np": 0.5,
                             "big": 10**400}
    assert type(mixed.metrics["np"]) is float and mixed.rules == {"x": results.lower()}


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
    for doc in ({"benchmarks": []}, {"schema_version": "1", "records": {}},
                {"schema_version": 0, "records": {}}):
        path.write_text(json.dumps(doc))
        with pytest.raises(SchemaError, match="not a harness results file") as info:
            results.load(path)
        assert not isinstance(info.value, results.NewerSchemaError)
        assert "schema_version is" in str(info.value)


V1_RUN = {  # what a version 1 harness wrote: no faults, complete or selection when clean
    "schema_version": 1,
    "fingerprint": {"device_type": "cpu", "stack_id": "torch-2.13.0"},
    "started": "2026-12-01T10:18:36Z", "finished": "2026-12-01T10:23:24Z",
    "records": {"ops/exp/float16/fwd": {"suite": "ops", "status": "pass",
                                        "metrics": {"max_rel_err": 4.9e-4}, "rules": {}}},
}


def test_a_version_1_file_is_read_through_its_migration(tmp_path):
    assert results.SCHEMA_VERSION == 2
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(V1_RUN))
    loaded = results.load(path)
    assert loaded.faults == [] and loaded.complete is True and loaded.seed is None
    assert loaded.records["ops/exp/float16/fwd"].metrics == {"max_rel_err": 4.9e-4}
    doc = results.migrate(V1_RUN)
    assert doc["schema_version"] == 2
    assert {k: doc[k] for k in ("seed", "faults", "complete", "selection")} == \
        {"seed": None, "faults": [], "complete": True, "selection": None}
    assert V1_RUN["schema_version"] == 1 and "faults" not in V1_RUN  # input untouched
    interrupted = dict(V1_RUN, complete=False, faults=["example.add_drift"], seed=7)
    doc = results.migrate(interrupted)  # what version 1 did write is kept
    assert (doc["complete"], doc["faults"], doc["seed"]) == (False, ["example.add_drift"], 7)
    rewritten = json.loads(results.dumps(loaded))
    assert rewritten["schema_version"] == results.SCHEMA_VERSION  # written as the newest


def test_version_1_harness_errors_and_slower_benchmarks_keep_their_meaning():
    slow = {"suite": "bench", "status": "fail", "metrics": {"value": 2.0}, "rules": {},
            "info": {"bench_verdict": "regression"}}
    broken = {"suite": "bench", "status": "fail", "metrics": {}, "rules": {},
              "message": "the workload raised"}  # a failing check, not a slower one
    v1 = dict(V1_RUN, records={"bench/op/mm/float32/n256": slow, "bench/x/y": broken},
              verdict={"verdict": "no-go", "errors": ["baseline error: corrupt"]})
    run = RunResults.from_json(v1)
    assert run.errors == ["baseline error: corrupt"]  # judged again, still NO-GO for it
    assert run.records["bench/op/mm/float32/n256"].status == "slower"
    assert run.records["bench/x/y"].status == "fail"
    assert v1["records"]["bench/op/mm/float32/n256"]["status"] == "fail"  # input untouched
    assert RunResults.from_json(V1_RUN).errors == []


def test_migration_steps_run_in_order_from_the_files_version(tmp_path, monkeypatch):
    """Adding a version is one function and one table row (Note [Schema versions and
    migrations]): a version 1 file goes through every step up to the newest."""
    def update_to_3(doc):
        doc["faults"] = [f"{name}!" for name in doc["faults"]]  # needs step 2's default
        return doc

    monkeypatch.setattr(results, "SCHEMA_VERSION", 3)
    monkeypatch.setitem(results.MIGRATIONS, 3, update_to_3)
    doc = results.migrate(dict(V1_RUN, faults=["ops.x"]))
    assert doc["schema_version"] == 3 and doc["faults"] == ["ops.x!"]
    assert doc["selection"] is None  # step 2 ran first
    assert results.migrate(dict(V1_RUN, schema_version=2, faults=["a"]))["faults"] == ["a!"]
    assert results.migrate(dict(V1_RUN, schema_version=3, faults=["a"]))["faults"] == ["a"]


def test_the_migration_table_has_one_step_per_version():
    assert sorted(results.MIGRATIONS) == list(range(2, results.SCHEMA_VERSION + 1))
    assert all(step.__name__ == f"update_to_{version}"
               for version, step in results.MIGRATIONS.items())


def test_a_newer_file_is_refused_naming_file_versions_and_the_fix(tmp_path):
    path = tmp_path / "future.json"
    path.write_text(json.dumps(dict(V1_RUN, schema_version=results.SCHEMA_VERSION + 1)))
    with pytest.raises(results.NewerSchemaError) as info:
        results.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: schema_version {results.SCHEMA_VERSION + 1} is newer")
    assert f"versions 1 to {results.SCHEMA_VERSION}" in message
    assert "Upgrade the harness" in message and "not a harness results file" not in message


COMMITTED = sorted((Path(__file__).resolve().parents[1] / "baselines").glob("**/*.json"))


@pytest.mark.parametrize("path", COMMITTED, ids=[p.parent.name for p in COMMITTED])
def test_committed_baselines_keep_loading(path):
    version = json.loads(path.read_text())["schema_version"]
    assert 1 <= version <= results.SCHEMA_VERSION
    loaded = results.load(path)
    assert loaded.records and loaded.fingerprint["stack_id"] == path.stem


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


# ------------------------------------------------ Note [Compressed run files]

def _a_run(fingerprint, n=200):
    run = RunResults(fingerprint=fingerprint, started="2026-12-03T10:00:00Z", seed=3,
                     outcomes={"suites/x.py::t": "passed"})
    for i in range(n):
        run.add(Record(f"ops/exp/float16/fwd/s{i}", metrics={"max_rel_err": i * 1e-4,
                                                             "cosine": 1.0, "n": i},
                       rules={"max_rel_err": results.lower(2.0, 1e-6)},
                       test="suites/ops/test_catalog.py::test_op[exp-float16]",
                       info={"aten_ops": {"fwd": ["aten.exp"]}}))
    return run


def test_a_run_file_is_gzip_of_the_same_json_and_loads_field_for_field(tmp_path, fingerprint):
    import gzip

    run = _a_run(fingerprint)
    packed = results.write(run, tmp_path / f"20261203T100000Z-cpu{results.RESULTS_SUFFIX}")
    plain = results.write(run, tmp_path / "plain.json")
    raw = packed.read_bytes()
    assert raw[:2] == results.GZIP_MAGIC
    assert gzip.decompress(raw).decode() == plain.read_text() == results.dumps(run)
    assert len(raw) * 3 < plain.stat().st_size
    assert results.load(packed).to_json() == results.load(plain).to_json() == run.to_json()
    assert results.read_document(packed) == json.loads(plain.read_text())
    assert [p.name for p in results.results_files(tmp_path)] == [packed.name, "plain.json"]
    assert results.RESULT_NAME.match(packed.name)


def test_a_damaged_or_truncated_or_oversized_gzip_is_a_schema_error(tmp_path, fingerprint,
                                                                    monkeypatch):
    import gzip

    path = results.write(_a_run(fingerprint), tmp_path / "r.json.gz")
    raw = path.read_bytes()
    (tmp_path / "cut.json.gz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(SchemaError, match="cut.json.gz: the gzip stream ends early"):
        results.load(tmp_path / "cut.json.gz")
    (tmp_path / "bad.json.gz").write_bytes(results.GZIP_MAGIC + b"\x08\x00garbage")
    with pytest.raises(SchemaError, match="bad.json.gz: (a damaged gzip file|the gzip stream ends early)"):
        results.load(tmp_path / "bad.json.gz")
    (tmp_path / "bomb.json.gz").write_bytes(gzip.compress(b" " * (3 << 20)))
    monkeypatch.setenv(results.MAX_BYTES_ENV, "2")
    with pytest.raises(SchemaError, match="decompresses to over the 2 MB"):
        results.load(tmp_path / "bomb.json.gz")


def test_rules_read_from_json_are_shared_and_written_back_as_read(monkeypatch):
    """Rule.from_json keeps one frozen Rule per description; an int and a float that
    compare equal stay apart (the JSON round trip is lossless), and a refused rule is
    refused every time (never kept); past the cache's size rules are built, not kept."""
    from harness.results import Rule

    monkeypatch.setattr(results, "_RULES", {})
    first = Rule.from_json({"better": "lower", "rel": 2.0, "abs": 0.0})
    assert Rule.from_json({"better": "lower", "rel": 2.0, "abs": 0.0}) is first
    as_int = Rule.from_json({"better": "lower", "rel": 2, "abs": 0.0})
    assert as_int is not first and json.dumps(as_int.to_json()) == \
        '{"better": "lower", "rel": 2, "abs": 0.0}'
    for _ in range(2):
        with pytest.raises(SchemaError, match="expected a ratio >= 1.0"):
            Rule.from_json({"better": "lower", "rel": 0.5})
        with pytest.raises(SchemaError, match="unknown keys"):
            Rule.from_json({"better": "lower", "bogus": [1]})
    assert len(results._RULES) == 2
    monkeypatch.setattr(results, "_RULES_KEPT", 2)
    third = Rule.from_json({"better": "higher", "rel": 1.0, "abs": 0.001})
    assert third == Rule("higher", 1.0, 0.001) and len(results._RULES) == 2


def test_a_rules_json_is_built_once_and_to_json_is_a_copy():
    rule = results.lower(2.0, 1e-6)
    assert rule.json is rule.json  # built once per rule
    copy = rule.to_json()
    copy["rel"] = 9.0
    assert rule.json == {"better": "lower", "rel": 2.0, "abs": 1e-6} == rule.to_json()
    assert results.Rule.from_json(rule.to_json()) == rule
