"""The store of runs (harness/store): lossless, queryable, migrated, reliable, on SQLite and
on a real PostgreSQL (tests/pg.py)."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import results
from harness.results import Record, Rule, RunResults
from harness.store import NewerStoreError, StoreError, import_paths, mask, open_store
from harness.store.series import series_of
from harness.store.shards import derive_run_id, label, merge, problems_of, unstable_order

ROOT = Path(__file__).resolve().parent.parent


def _every_field(fingerprint, started="2026-12-01T23:00:00Z", scale=1.0) -> RunResults:
    """A run with every field of docs/schema.md set to a value that is not its default."""
    records = {
        "ops/exp/float16/fwd": Record(
            "ops/exp/float16/fwd", "pass",
            metrics={"max_rel_err": 4.9e-4 * scale, "cosine": 1.0, "nan_ok": True,
                     "worst": "inf", "dtype": "float16", "none": None, "count": 3},
            rules={"max_rel_err": Rule("lower", 2.0, 1e-6, noise=3.0, severity="regression"),
                   "dtype": Rule("equal", 1.0, 0.0)},
            test="suites/ops/test_ops.py::test_op[exp]", message="",
            info={"device_index": 0, "aten": ["aten::exp"], "nested": {"a": [1, 2.5]}}),
        "amp/loss/bfloat16": Record("amp/loss/bfloat16", "fail", metrics={"loss": 2.5},
                                    message="diverged\nreproduce: pytest ...", test="t::x"),
        "bench/mm/float32": Record("bench/mm/float32", "slower",
                                   metrics={"ms": 1.5, "ms.spread": 0.1},
                                   rules={"ms": Rule("lower", 1.05, 0.0, noise=2.0)},
                                   info={"runs": [{"value": 1.5 * scale, "control_ms": 2.0}]}),
        "ops/sort/int64": Record("ops/sort/int64", "unsupported"),
    }
    return RunResults(
        fingerprint=dict(fingerprint, host="node-7", cann_components={"runtime": "8.0"}),
        records=records, started=started, finished="2026-12-02T00:10:00Z", seed=7,
        outcomes={"t::x": "failed", "suites/ops/test_ops.py::test_op[exp]": "passed"},
        findings=[{"kind": "regression", "record_id": "amp/loss/bfloat16", "metric": "loss",
                   "old": 1.0, "new": 2.5, "rule": {"better": "lower", "rel": 2.0, "abs": 0.0},
                   "baseline": "torch-2.3.0", "message": "m"}],
        baseline="/b/cpu/x/torch-2.3.0.json", faults=["ops.exp_bias"], complete=False,
        verdict={"verdict": "no-go", "reasons": ["1 failing check(s)"], "failing": ["a"]},
        selection={"markexpr": "npu", "keyword": "exp", "op_filter": "exp", "run_slow": True,
                   "args": ["suites/ops"]},
        errors=["baseline error: damaged"])


def _schema_fields() -> list[str]:
    """The top-level fields docs/schema.md documents."""
    text = (ROOT / "docs" / "schema.md").read_text()
    table = text.split("## Top level", 1)[1].split("###", 1)[0]
    return [name for row in re.findall(r"^\| (`[^|]+)\|", table, re.M)
            for name in re.findall(r"`(\w+)`", row)]


def test_every_field_of_the_schema_round_trips(tmp_path, store_url, fingerprint):
    fields = _schema_fields()
    assert {"schema_version", "records", "selection", "errors", "verdict"} <= set(fields)
    run = _every_field(fingerprint)
    path = results.write(run, tmp_path / "20261201T230000Z-cpu.json")
    loaded = results.load(path)  # what the store imports: the file as results.load reads it
    assert set(fields) <= set(loaded.to_json())  # every documented field is in this run
    store = open_store(store_url)
    assert import_paths(store, [tmp_path]) == (1, 0, [])
    [row] = store.runs()
    back = store.load(row.pk)
    assert back.to_json() == loaded.to_json()
    assert results.dumps(back) == results.dumps(loaded)
    assert (row.device_type, row.host, row.complete, row.faulted, row.verdict) == \
        ("cpu", "node-7", False, True, "NO-GO")
    assert row.counts == {"pass": 1, "fail": 1, "slower": 1, "unsupported": 1}


def test_importing_again_stores_nothing_twice(tmp_path, store_url, fingerprint):
    results.write(_every_field(fingerprint), tmp_path / "a" / "20261201T230000Z-cpu.json")
    store = open_store(store_url)
    assert import_paths(store, [tmp_path / "a"])[:2] == (1, 0)
    assert import_paths(store, [tmp_path / "a"])[:2] == (0, 1)
    assert len(store.runs()) == 1


def test_a_run_written_from_its_json_once_is_the_run_written_twice(tmp_path, store_url,
                                                                   fingerprint):
    """The run's end builds its JSON once for the results file and the store: the same
    file, the same stored run (its digest: storing it again stores nothing), and the
    document is read, never changed."""
    run = _every_field(fingerprint)
    run.records["amp/loss/bfloat16"].message = "diverged: pertes \u2264 \u221e, \u00e9cart\n"
    doc = run.to_json()
    kept = json.dumps(doc, sort_keys=True)
    encoded = results.encode(run, doc)  # Note [A run encoded once]
    assert encoded.compact_records() == json.dumps(doc["records"], separators=(",", ":"),
                                                   allow_nan=False)
    text = results.dumps(run, encoded)
    assert text == results.dumps(run)
    lines = [line.removesuffix(",") for line in text.splitlines()]
    for rid, rec in doc["records"].items():  # one record per line, as the file always was
        assert f" {json.dumps(rid)}: {json.dumps(rec, separators=(',', ':'))}" in lines
    store = open_store(store_url)
    pk, new = store.put(run, run_id="r1", encoded=encoded)
    assert new and store.put(run, run_id="r1") == (pk, False)
    assert json.dumps(doc, sort_keys=True) == kept
    assert store.load(pk).to_json() == doc


def test_runs_are_queryable_by_device_stack_host_time_and_record(store_url, fingerprint):
    store = open_store(store_url)
    for i, (slug, stack, host) in enumerate([("910b", "cann-8.0.0", "a"),
                                             ("910b", "cann-8.1.RC1", "b"),
                                             ("310p", "cann-8.0.0", "a")]):
        run = _every_field(dict(fingerprint, device_type="npu", device_slug=slug,
                                stack_id=stack), started=f"2026-12-0{i + 1}T23:00:00Z")
        run.fingerprint["host"] = host
        if i == 2:
            del run.records["ops/sort/int64"]
        store.put(run, run_id=f"n{i}")
    assert [r.run_id for r in store.runs(device_type="npu", device_slug="910b")] == ["n0", "n1"]
    assert [r.run_id for r in store.runs(stack_id="cann-8.0.0")] == ["n0", "n2"]
    assert [r.run_id for r in store.runs(host="a", since="2026-12-02")] == ["n2"]
    assert [r.run_id for r in store.runs(record="ops/sort/int64")] == ["n0", "n1"]
    assert [s for _, s in store.record_statuses("ops/sort/int64")] == ["unsupported"] * 2


def test_the_store_answers_the_baseline_of_a_stack(store_url, fingerprint):
    store = open_store(store_url)
    run = _every_field(fingerprint)
    store.put(run, run_id="b", role="baseline")
    assert store.runs() == []  # a baseline is not a nightly run
    found = store.baseline("cpu", fingerprint["device_slug"], fingerprint["stack_id"])
    assert found is not None and found.to_json() == run.to_json()
    assert store.baseline("cpu", fingerprint["device_slug"], "torch-9.9") is None


# ----------------------------------------------------------------- schema versions

def _alembic(url: str, revision: str) -> None:
    from alembic import command
    from sqlalchemy import create_engine

    from harness.store.db import alembic_config, driver_url

    engine = create_engine(driver_url(url))
    with engine.begin() as conn:
        config = alembic_config()
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
    engine.dispose()


def test_the_ids_of_many_names_are_the_ids_of_each():
    """name_ids (the first write's 250,000 names at once) is name_id name by name, for
    every kind, non-ASCII names too: what readers look a record up by."""
    from harness.store import schema

    kinds = ["r", "m", "b", "m"]
    names = ["ops/exp/float16/fwd/odd257", "ops/exp/float16/fwd/odd257:max_abs_err",
             "bench/op/mm/float32/n256", "model/ünïcode/aten.mm/ab12/fwd:rmse"]
    assert schema.name_ids(kinds, names) == [schema.name_id(k, n) for k, n in zip(kinds, names)]
    assert schema.name_ids([], []) == []


def test_the_migrations_build_exactly_the_tables_of_the_schema(store_url):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import create_engine

    from harness.store import schema
    from harness.store.db import driver_url

    _alembic(store_url, "head")
    engine = create_engine(driver_url(store_url))
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), schema.metadata)
        version = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    engine.dispose()
    assert diff == [] and version == schema.HEAD


def _put_series_before_0003(self, conn, pk, series, record_ids) -> None:
    """How a run's series were stored before revision 0003: every value, in the order of a
    ``layouts`` row (a stand-in for Store._put_series of that code)."""
    import hashlib
    import zlib

    import numpy as np
    import sqlalchemy as sa

    from harness.store import schema
    from harness.store.db import _insert_ignoring

    ids = np.array([schema.name_id(kind, name) for kind, name, _, _ in series], dtype="<i8")
    digest = hashlib.sha256("\0".join([*(f"{kind}{name}" for kind, name, _, _ in series), "",
                                      *sorted(record_ids)]).encode()).hexdigest()
    layouts = sa.table("layouts", sa.column("digest"), sa.column("ids"), sa.column("kinds"))
    values = sa.table("series_values", sa.column("run_pk"), sa.column("layout"),
                      sa.column("vals"), sa.column("controls"))
    if conn.execute(sa.select(layouts.c.digest).where(layouts.c.digest == digest)).first() \
            is None:
        names = [{"id": schema.name_id("r", rid), "kind": "r", "name": rid} for rid in record_ids]
        names += [{"id": int(i), "kind": kind, "name": name}
                  for i, (kind, name, _, _) in zip(ids, series)]
        conn.execute(_insert_ignoring(conn, schema.names), names)
        conn.execute(layouts.insert().values(
            digest=digest, ids=zlib.compress(ids.tobytes()),
            kinds=zlib.compress("".join(k for k, _, _, _ in series).encode())))
    pack = (lambda xs: zlib.compress(np.array(xs, dtype="<f8").tobytes()))  # noqa: E731
    conn.execute(values.insert().values(
        run_pk=pk, layout=digest, vals=pack([v for _, _, v, _ in series]),
        controls=pack([np.nan if c is None else c for _, _, _, c in series])))


def test_an_older_store_is_migrated_and_keeps_its_runs(store_url, fingerprint, monkeypatch):
    """A store of revision 0001 (every series value of every run) is migrated to HEAD: its
    runs, and each run's every series value, read back the same (stored as differences
    from the layout's first run)."""
    import numpy as np

    from harness.store import schema
    from harness.store.db import Store, _engine

    _alembic(store_url, "0001")
    old = Store.__new__(Store)  # a 0001 store written by that code path
    old.url, old._layouts, old.engine = store_url, {}, _engine(store_url)
    runs = [_every_field(fingerprint, started=f"2026-12-0{k + 1}T23:00:00Z", scale=scale)
            for k, scale in enumerate([1.0, 1.0, 1.5, 2.0])]
    del runs[3].records["amp/loss/bfloat16"]  # another layout
    with monkeypatch.context() as patch:
        patch.setattr(Store, "_put_series", _put_series_before_0003)
        for k, run in enumerate(runs):
            old.put(run, run_id=f"old{k}")
    old.close()
    store = open_store(store_url)  # migrates to HEAD
    rows = store.runs()
    assert [r.run_id for r in rows] == ["old0", "old1", "old2", "old3"]
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar() \
            == schema.HEAD
    scanned = list(store.scan_series([r.pk for r in rows]))
    for row, run in zip(scanned, runs):
        want = series_of(run.records)
        names = store.names_of(row.ids.tolist())
        got = {names[int(i)]: v for i, v in zip(row.ids, row.values())}
        assert got == {name: value for _, name, value, _ in want}
        controls = {names[int(i)]: c for i, c in zip(row.ids, row.all_controls())
                    if not np.isnan(c)}
        assert controls == {name: c for _, name, _, c in want if c is not None}
    assert [len(r.pos) for r in scanned[:2]] == [0, 0]  # the first run of its layout, the same
    assert len(scanned[2].pos) == 2 and len(scanned[3].pos) == 0  # moved; a new layout
    store.put(_every_field(fingerprint, scale=3.0), run_id="new")  # the migrated store is written
    assert len(list(store.scan_series([store.runs(run_id="new")[0].pk]))[0].pos) == 2


def test_a_store_of_a_newer_harness_is_refused(store_url):
    store = open_store(store_url)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9001'")
    store.close()
    with pytest.raises(NewerStoreError) as info:
        open_store(store_url)
    text = str(info.value)
    assert "'9001' is newer than this harness" in text and "Upgrade the harness" in text
    assert mask(store_url) in text


# -------------------------------------------------------------------- reliability

WRITER = """
import sys
from harness import store
from harness.results import Record, RunResults
s = store.open_store(sys.argv[1])
fp = {"device_type": "cpu", "device_slug": "s", "stack_id": "torch-2.4.0"}
for k in range(3):
    run = RunResults(fp, {f"ops/r{i}": Record(f"ops/r{i}", metrics={"e": i + k * 0.1})
                          for i in range(200)}, started=f"2026-12-{sys.argv[2]}T0{k}:00:00Z")
    s.put(run, run_id=f"w{sys.argv[2]}-{k}")
"""


def test_eight_concurrent_writers_lose_nothing(store_url):
    open_store(store_url).close()  # created once; the writers race on the rest
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, store_url, f"{i + 1:02d}"],
                                env=env) for i in range(8)]
    assert [w.wait(300) for w in writers] == [0] * 8
    store = open_store(store_url)
    rows = store.runs()
    assert sorted(r.run_id for r in rows) == sorted(f"w{i + 1:02d}-{k}" for i in range(8)
                                                    for k in range(3))
    assert all(len(store.load(r.pk).records) == r.n_records == 200 for r in rows)
    # each run's series are its own, whichever writer stored the layout's reference first
    for row in store.scan_series([r.pk for r in rows]):
        k = int(rows[row.index].run_id.rsplit("-", 1)[1])
        names = store.names_of(row.ids.tolist())
        assert {names[int(i)]: v for i, v in zip(row.ids, row.values())} == \
            {f"ops/r{i}:e": i + k * 0.1 for i in range(200)}


def test_a_layout_stored_first_by_another_writer_is_what_a_run_differs_from(store_url,
                                                                              fingerprint):
    """PostgreSQL: writer A stores a layout between writer B's look for it and B's insert
    of its names and itself (B's inserts then do nothing); B's run is stored as its differences from A's
    reference, not from its own values. (SQLite writers hold the write lock from the
    start of the transaction, so there this cannot happen.)"""
    from sqlalchemy import event

    if not store_url.startswith("postgresql"):
        pytest.skip("SQLite serialises writers (BEGIN IMMEDIATE): no writer can come between")
    a, b = open_store(store_url), open_store(store_url)
    run_a, run_b = _every_field(fingerprint, scale=1.0), _every_field(fingerprint, scale=2.0)
    raced = []

    @event.listens_for(b.engine, "before_cursor_execute")
    def _a_first(conn, cursor, statement, *args):
        if statement.startswith("INSERT INTO names") and not raced:
            raced.append(a.put(run_a, run_id="a"))

    b.put(run_b, run_id="b")
    assert raced and raced[0][1]
    store = open_store(store_url)
    rows = {r.run_id: r for r in store.runs()}
    for run_id, run in (("a", run_a), ("b", run_b)):
        [row] = store.scan_series([rows[run_id].pk])
        names = store.names_of(row.ids.tolist())
        got = {names[int(i)]: v for i, v in zip(row.ids, row.values())}
        assert got == {name: value for _, name, value, _ in series_of(run.records)}, run_id


KILLED_WRITER = """
import sys
from harness import store
from harness.results import Record, RunResults
s = store.open_store(sys.argv[1])
fp = {"device_type": "cpu", "device_slug": "s", "stack_id": "torch-2.4.0"}
for night in range(10000):
    run = RunResults(fp, {f"ops/r{i}/n{night}": Record(f"ops/r{i}/n{night}",
                     metrics={"e": i * 1.0 + night}) for i in range(3000)},
                     started=f"2026-01-01T00:00:{night:05d}Z")
    s.put(run, run_id=f"k{night}")
    print(night, flush=True)
"""


def test_kill_9_during_a_write_leaves_every_run_absent_or_whole(store_url):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, store_url], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "0"  # one run stored; more are under way
        time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    store = open_store(store_url)
    rows = store.runs()
    assert rows, "the first run was committed before the kill"
    for row in rows:  # each stored run is whole: its records and its series
        run = store.load(row.pk)
        assert len(run.records) == row.n_records == 3000
        assert sum(len(r.values()) for r in store.scan_series([row.pk])) == 3000
    if store_url.startswith("sqlite"):
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
    store.put(RunResults({"device_type": "cpu", "stack_id": "torch-2.4.0"}), run_id="after")


def test_an_unreachable_store_names_the_url_with_the_password_masked():
    url = "postgresql://nightly:hunter2@127.0.0.1:1/runs"
    with pytest.raises(StoreError) as info:
        open_store(url)
    text = str(info.value)
    assert "hunter2" not in text and "postgresql://nightly:***@127.0.0.1:1/runs" in text
    assert "start the server or correct host" in text


def test_an_unknown_url_kind_is_refused_before_connecting():
    with pytest.raises(StoreError, match="neither sqlite:///PATH nor postgresql://"):
        open_store("mysql://u:pw@h/db")


# -------------------------------------------------------------------------- shards

class _Row:
    def __init__(self, pk, shard, complete=True, host="h"):
        self.pk, self.shard, self.complete, self.host, self.started = \
            pk, shard, complete, host, "t"


def test_a_missing_duplicated_or_crashed_shard_is_named():
    assert problems_of([_Row(1, "1/3"), _Row(2, "2/3"), _Row(3, "3/3")]) == []
    [missing] = problems_of([_Row(1, "1/3"), _Row(3, "3/3")])
    assert missing.startswith("shard 2/3 is missing")
    [duplicated] = problems_of([_Row(1, "1/2"), _Row(2, "2/2"), _Row(3, "2/2", host="x")])
    assert duplicated.startswith("shard 2/2 is stored 2 times") and "on x" in duplicated
    [crashed] = problems_of([_Row(1, "1/2"), _Row(2, "2/2", complete=False)])
    assert crashed.startswith("shard 2/2 (run 2 on h) did not complete")
    assert "disagree" in problems_of([_Row(1, "1/2"), _Row(2, "2/3")])[0]


def test_merged_shards_are_one_run_and_a_problem_makes_it_no_go(fingerprint):
    from harness.verdict import GO, NO_GO, judge

    parts = [RunResults(fingerprint, {f"ops/{i}": Record(f"ops/{i}", test=f"t{i}")},
                        started=f"2026-12-01T0{i}:00:00Z", finished=f"2026-12-01T0{i}:30:00Z",
                        outcomes={f"t{i}": "passed"}) for i in range(3)]
    whole = merge(parts, [])
    assert sorted(whole.records) == ["ops/0", "ops/1", "ops/2"] and whole.complete
    assert (whole.started, whole.finished) == ("2026-12-01T00:00:00Z", "2026-12-01T02:30:00Z")
    assert judge(whole).level == GO
    broken = judge(merge(parts[:2], ["shard 3/3 is missing (never stored)"]))
    assert broken.level == NO_GO and "shard 3/3 is missing" in broken.reasons[1]


def test_run_ids_come_from_ci_variables():
    assert derive_run_id({"GITHUB_RUN_ID": "42", "GITHUB_RUN_ATTEMPT": "2"}) == "github-42-2"
    assert derive_run_id({"CI_PIPELINE_ID": "9"}) == "ci-9"
    assert derive_run_id({}, now="T").startswith("local-T-")
    assert label(None, None) == "1/1" and label(2, 3) == "2/3"


def test_shards_that_would_order_their_tests_apart_are_refused_before_the_run():
    """pytest-split takes its part of the tests in the order it gets them: shards whose
    processes each shuffle them with a seed of their own (pytest-randomly's default, or
    ``last``) would overlap and leave tests out, so such a shard is refused before it runs,
    naming the fixes; one order for every shard (no shuffling, one seed) is not refused."""
    import types

    from harness.options import _shuffled_by

    why = unstable_order(3, "pytest-randomly")
    assert "--splits 3" in why and "overlap" in why
    assert "-p no:randomly" in why and "--randomly-dont-reorganize" in why \
        and "--randomly-seed" in why
    assert unstable_order(None, "pytest-randomly") is None
    assert unstable_order(1, "pytest-randomly") is None and unstable_order(3, None) is None

    def config(plugin: bool, reorganize: bool = True, seed: object = "default"):
        return types.SimpleNamespace(
            pluginmanager=types.SimpleNamespace(
                get_plugin=lambda name: object() if plugin and name == "randomly" else None),
            getoption=lambda name, default=None: (reorganize if name == "randomly_reorganize"
                                                  else default),
            known_args_namespace=types.SimpleNamespace(randomly_seed=seed))

    assert _shuffled_by(config(True)) == "pytest-randomly"
    assert _shuffled_by(config(True, seed="last")) == "pytest-randomly"
    assert _shuffled_by(config(True, seed=7)) is None
    assert _shuffled_by(config(True, reorganize=False)) is None
    assert _shuffled_by(config(False)) is None


def _shard(tmp_path, group: int, run_id: str, store: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("HARNESS_STORE", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "npu", "suites/example", "-q",
         "-p", "no:cacheprovider", "-p", "no:randomly", "--splits", "3", "--group", str(group),
         "--run-id", run_id,
         "--splitting-algorithm", "least_duration",
         f"--store={store}", f"--results-dir={tmp_path / f'r{group}'}", "--baseline", "off"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _verdict(run_id: str, store: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "verdict", run_id, "--store",
                           store], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # three pytest processes; docs/nightly.md's CPU block (a default test) runs two
@pytest.mark.timeout(900)
def test_three_shards_make_one_verdict_and_a_killed_one_is_no_go(tmp_path):
    store = f"sqlite:///{tmp_path / 'fleet.db'}"
    for group in (1, 3):  # shard 2 is "killed": it never stores its part
        done = _shard(tmp_path, group, "night-1", store)
        assert done.returncode == 0, done.stdout[-2000:]
    missing = _verdict("night-1", store)
    assert missing.returncode == 1, missing.stdout
    assert missing.stdout.startswith("VERDICT: NO-GO") and "shard 2/3 is missing" in missing.stdout
    assert _shard(tmp_path, 2, "night-1", store).returncode == 0
    whole = _verdict("night-1", store)
    assert whole.returncode == 0, whole.stdout
    assert whole.stdout.startswith("VERDICT: GO") and "3 shard(s) stored (1/3, 2/3, 3/3)" \
        in whole.stdout


# ---------------------------------------------------------------- runs and history

def test_a_run_is_stored_and_pruning_deletes_only_json(pytester, tmp_path):
    pytester.makepyfile(test_x="def test_x(): pass")
    (tmp_path / "res").mkdir()
    for k in range(3):
        (tmp_path / "res" / f"2026010{k}T000000Z-cpu.json").write_text("{}")
    store = tmp_path / "res" / "harness.db"
    open_store(f"sqlite:///{store}").close()
    results_mod = results
    removed = results_mod.prune(tmp_path / "res", 1)
    assert len(removed) == 2 and store.exists()


def test_an_unwritable_store_keeps_the_json_and_says_how_to_import(tmp_path, fingerprint):
    from harness import session

    state = session.RunState(
        session.Settings(results_dir=tmp_path / "res", store=f"sqlite:///{tmp_path}/db/x.db",
                         run_id="r1", keep_results=1), device=type("D", (), {"type": "cpu"})(),
        why=[], run=_every_field(fingerprint), selection=None, controller=True)
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "x.db").mkdir()  # the store's file became a folder mid-run
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "20260101T000000Z-cpu.json").write_text("{}")
    session._write_results(state)
    assert len(results.results_files(tmp_path / "res")) == 2  # nothing pruned
    assert state.store_problem.startswith("STORE NOT WRITTEN: store sqlite:///")
    assert "python -m harness store import" in state.store_problem and "--run-id r1" in \
        state.store_problem


def test_history_from_the_store_finds_what_history_from_files_finds(tmp_path, store_url,
                                                                     fingerprint):
    from harness.bench import history

    folder = tmp_path / "runs"
    for night in range(8):
        run = _every_field(fingerprint, started=f"2026-12-{night + 1:02d}T23:00:00Z",
                           scale=1.0 if night < 4 else 1.6)
        run.faults, run.complete = [], True
        results.write(run, folder / f"202612{night + 1:02d}T230000Z-cpu.json")
    faulted = _every_field(fingerprint, started="2026-12-30T00:00:00Z")
    results.write(faulted, folder / "20261230T000000Z-cpu.json")
    files, what_files = history.load_runs(folder)
    expected = history.analyse(files)
    store = open_store(store_url)
    import_paths(store, [folder])
    chosen, what = history.store_runs(store)
    rows = history.analyse_store(store, chosen)
    assert {r["series"] for r in rows} == {"ops/exp/float16/fwd:max_rel_err",
                                          "bench/mm/float32"}
    assert rows == expected and what.endswith("left out 1 fault-injected run(s)")
    assert what_files.endswith("left out 1 fault-injected run(s)")


def test_history_command_reads_the_store(tmp_path, capsys, fingerprint):
    from harness import cli

    url = f"sqlite:///{tmp_path / 'h.db'}"
    store = open_store(url)
    for night in range(8):
        run = _every_field(fingerprint, started=f"2026-12-{night + 1:02d}T23:00:00Z",
                           scale=1.0 if night < 4 else 2.0)
        run.faults, run.complete = [], True
        store.put(run, run_id=f"n{night}", source=f"night{night}.json")
    assert cli.main(["history", "--store", url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["what"].startswith("8 runs of cpu/")
    assert {(c["series"], c["run"]) for c in out["changes"]} == {
        ("bench/mm/float32", "night4.json"), ("ops/exp/float16/fwd:max_rel_err", "night4.json")}


def test_the_plugin_stays_glue_every_hook_at_most_25_lines():
    import ast

    tree = ast.parse((ROOT / "harness" / "plugin.py").read_text())
    long = {node.name: node.end_lineno - node.lineno + 1 + len(node.decorator_list)
            for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
            and node.name.startswith("pytest_")}
    assert {name: n for name, n in long.items() if n > 25} == {}


# ------------------------------------------------------------------------ the matrix

def _matrix_store(tmp_path, fingerprint):
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    store = open_store(url)
    nights = [("910b", "cann-8.0.RC3", "pass"), ("910b", "cann-8.0.RC3", "pass"),
              ("910b", "cann-8.0.0", "fail"), ("310p<script>", "cann-8.0.0", "pass"),
              ("310p<script>", "cann-8.1.RC1", "pass")]
    for k, (slug, stack, status) in enumerate(nights):
        fp = dict(fingerprint, device_type="npu", device_slug=slug, stack_id=stack)
        run = RunResults(fp, {"ops/exp": Record("ops/exp", status, test="t1"),
                              "amp/loss": Record("amp/loss", "pass", test="t2"),
                              "bench/mm": Record("bench/mm", "skip", test="t3")},  # not run
                         started=f"2026-12-0{k + 1}T23:00:00Z", outcomes={"t1": "passed"})
        store.put(run, run_id=f"n{k}", source=str(tmp_path / f"n{k}.json"))
    return url


def test_the_matrix_has_a_cell_per_device_stack_and_family(tmp_path, fingerprint):
    from harness.report import matrix

    store = open_store(_matrix_store(tmp_path, fingerprint))
    rows, upgrades, families = matrix.build(store)
    assert families == ["amp", "ops"]
    assert [(r.device, r.stack) for r in rows] == [
        ("npu/310p<script>", "cann-8.0.0"), ("npu/310p<script>", "cann-8.1.RC1"),
        ("npu/910b", "cann-8.0.RC3"), ("npu/910b", "cann-8.0.0")]
    assert rows[3].cells["ops"].level == "NO-GO" and rows[3].cells["amp"].level == "GO"
    assert [level for _, level in rows[2].cells["ops"].nights] == ["GO", "GO"]
    assert upgrades["npu/910b"] == ["cann-8.0.RC3 -> cann-8.0.0 on 2026-12-03T23:00:00Z"]


def test_the_matrix_page_renders_escaped_in_a_browser(tmp_path, fingerprint):
    import browser

    from harness import cli

    url = _matrix_store(tmp_path, fingerprint)
    html, md = tmp_path / "matrix.html", tmp_path / "matrix.md"
    assert cli.main(["report", "--matrix", "--html", str(html), "--md", str(md),
                     "--store", url]) == 0
    text = html.read_text()
    assert "<script>" not in text and "310p&lt;script&gt;" in text  # autoescaped
    assert "| `npu/910b` | `cann-8.0.0` |" in md.read_text()
    if not browser.CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium: the page was checked as text only")
    dom = browser.dump_dom(html)
    assert dom.count('<td class="cell" data-level=') == 8
    assert dom.count("<rect ") == 2 * 2 + 1 * 2 + 1 * 2 + 1 * 2
    assert 'data-level="NO-GO"' in dom and "cann-8.0.RC3 -&gt; cann-8.0.0" in dom


def test_a_sqlite_connection_keeps_the_names_tree_in_its_page_cache(tmp_path):
    """Note [SQLite's page cache]: every SQLite connection of a store gets the 64 MiB
    page cache (the default 2 MB made a run's first write of its ~290,000 names read most
    B-tree pages back from the file), next to its WAL journal."""
    from harness.store.db import SQLITE_CACHE_KIB

    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == -SQLITE_CACHE_KIB
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        store.close()
    assert SQLITE_CACHE_KIB >= 32768
