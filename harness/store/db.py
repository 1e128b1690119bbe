"""The store's one code path over SQLite and PostgreSQL (SQLAlchemy Core, psycopg 3).

Note [Store schema versions]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The schema is versioned with Alembic from its first revision (migrations/). A new store
is created from :mod:`harness.store.schema` and stamped with :data:`schema.HEAD` (what
Alembic's cookbook recommends: ``create_all`` then ``stamp``), in one transaction, so a
fresh SQLite file costs no Alembic import; tests/test_store.py proves the migration chain
builds the same tables. A store at an older revision is upgraded by Alembic when it is
opened; one at a revision this harness does not know was written by a newer harness and
is refused (:class:`NewerStoreError`), with the fix: upgrade the harness. Never a
downgrade: an older harness must not rewrite what a newer one stored.

Note [One write, one transaction]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A run is stored in one transaction (its row, its records, its series, its durations), so
a writer killed at any point (kill -9 included) leaves the run absent or whole: SQLite's
WAL and PostgreSQL's commit make that so. SQLite writers take the write lock when the
transaction begins (``BEGIN IMMEDIATE``), waiting up to the busy timeout for one another
instead of failing on a lock upgrade; names (record ids, series) are interned with
``INSERT ... ON CONFLICT DO NOTHING``, so concurrent writers of the same names do not
collide. A run already stored (the same document under the same run id and shard:
its ``digest``) is not stored twice: importing a folder again is harmless.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import itertools
import json
import re
import zlib
from pathlib import Path
from typing import Iterable, Optional, Sequence

from harness.store import schema
from harness.store.url import ENV, NewerStoreError, StoreError, check_url, driver_url, mask

BUSY_SECONDS = 60.0
SQLITE_CACHE_KIB = 65536  # per SQLite connection: Note [SQLite's page cache]
ROLES = ("run", "baseline")


@dataclasses.dataclass(frozen=True)
class StoredRun:
    """One stored run's row, without its documents."""

    pk: int
    run_id: str
    shard: str
    role: str
    device_type: str
    device_slug: str
    stack_id: str
    host: str
    started: str
    finished: str
    complete: bool
    faulted: bool
    verdict: str
    n_records: int
    counts: dict
    source: str

    @property
    def honest(self) -> bool:
        """Not fault-injected, complete (Note [Honest comparisons] in harness.verdict)."""
        return self.complete and not self.faulted


_ROW_COLUMNS = [f.name for f in dataclasses.fields(StoredRun)]


@dataclasses.dataclass(frozen=True)
class SeriesRow:
    """One stored run's history series (Note [What the store keeps]): ``ids`` are the
    series name ids of its layout (int64), ``kinds`` their kinds (``b``/``m``, uint8);
    ``ref_vals`` and ``ref_controls`` the layout's reference (the same arrays for every run
    of that layout; controls NaN where there is none, None when not read); ``pos`` the
    positions where this run differs from the reference, ``vals`` and ``controls`` its
    values and controls there."""

    index: int  # in the pks scanned
    layout: str
    ids: object
    kinds: object
    ref_vals: object
    ref_controls: object
    pos: object
    vals: object
    controls: object

    def values(self):
        """Every series' value in this run, in the layout's order."""
        return _patched(self.ref_vals, self.pos, self.vals)

    def all_controls(self):
        """Every series' host control in this run (NaN: none), or None when not read."""
        return None if self.ref_controls is None else _patched(self.ref_controls, self.pos,
                                                                 self.controls)


def _patched(reference, pos, values):
    """The reference with ``values`` at positions ``pos`` (a copy)."""
    out = reference.copy()
    out[pos] = values
    return out


def _engine(url: str):
    from sqlalchemy import create_engine, event

    check_url(url)
    target = driver_url(url)
    if target.startswith("sqlite"):
        path = target.split(":///", 1)[1] if ":///" in target else ""
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(target, connect_args={"timeout": BUSY_SECONDS})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record) -> None:
            dbapi_conn.isolation_level = None  # transactions begin below, not in the driver
            cursor = dbapi_conn.cursor()
            for pragma in ("journal_mode=WAL", f"busy_timeout={int(BUSY_SECONDS * 1000)}",
                           "synchronous=NORMAL", "foreign_keys=ON",
                           f"cache_size=-{SQLITE_CACHE_KIB}"):  # Note [SQLite's page cache]
                cursor.execute(f"PRAGMA {pragma}")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(conn) -> None:  # Note [One write, one transaction]
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.info.get("write") else "BEGIN")

        return engine
    return create_engine(target, connect_args={"connect_timeout": 10}, pool_pre_ping=True)


def _fix(url: str) -> str:
    if driver_url(url).startswith("sqlite"):
        return ("give --store a writable path (sqlite:///PATH) or point --results-dir at a "
                "writable folder")
    return ("start the server or correct host, port, user, password and database in "
            f"--store / {ENV} (postgresql://USER:PASSWORD@HOST:PORT/DB)")


class Store:
    """Runs kept in a database: :meth:`put`, :meth:`load`, :meth:`runs`, :meth:`series`,
    :meth:`durations`, :meth:`baseline`. Open with :func:`harness.store.open_store`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._layouts: dict[str, tuple] = {}  # digest -> its reference (values, controls)
        try:
            self.engine = _engine(url)
            self._ensure_schema()
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - every driver error: one message with the fix
            raise self.error("cannot open", exc) from None

    def error(self, what: str, exc: BaseException) -> StoreError:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        first = re.sub(r"\(Background on this error.*", "", first).strip()
        return StoreError(f"store {mask(self.url)}: {what}: {mask(first)}; {_fix(self.url)}")

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------ schema

    def _write(self):
        """A connection whose transaction takes the write lock at once (SQLite)."""
        conn = self.engine.connect()
        conn.info["write"] = True
        return conn

    def _ensure_schema(self) -> None:
        from sqlalchemy import inspect, text

        with self.engine.connect() as conn:
            version = _revision(conn)
        if version == schema.HEAD:
            return
        if version is not None:
            self._migrate(version)
            return
        conn = self._write()
        try:
            with conn.begin():
                if conn.dialect.name == "postgresql":  # one creator at a time
                    conn.execute(text("SELECT pg_advisory_xact_lock(3535)"))
                version = _revision(conn)
                if version is None:
                    if inspect(conn).has_table("runs"):
                        raise StoreError(f"store {mask(self.url)}: has a runs table but no "
                                         "schema revision: not a harness store. Give another "
                                         "--store")
                    schema.metadata.create_all(conn)
                    _VERSION.create(conn, checkfirst=True)
                    conn.execute(_VERSION.insert().values(version_num=schema.HEAD))
        finally:
            conn.info.pop("write", None)
            conn.close()
        if version not in (None, schema.HEAD):
            self._migrate(version)

    def _migrate(self, version: str) -> None:
        from alembic import command
        from alembic.script import ScriptDirectory
        from alembic.util import CommandError

        config = alembic_config()
        try:
            ScriptDirectory.from_config(config).get_revision(version)
        except CommandError:
            raise NewerStoreError(
                f"store {mask(self.url)}: schema revision {version!r} is newer than this "
                f"harness knows (its newest is {schema.HEAD}); a newer harness wrote it. "
                "Upgrade the harness (pip install --upgrade npu-conformance, or update the "
                "checkout) to use this store; this one will not change it") from None
        conn = self._write()
        try:
            with conn.begin():
                config.attributes["connection"] = conn
                command.upgrade(config, "head")
        finally:
            conn.info.pop("write", None)
            conn.close()

    # ------------------------------------------------------------------ writing

    def put(self, run, *, run_id: str, shard: str = "1/1", source: str = "",
            role: str = "run", durations: Optional[dict[str, float]] = None,
            encoded=None) -> tuple[int, bool]:
        """Store one run (a :class:`harness.results.RunResults`) in one transaction (Note
        [One write, one transaction]); ``(its pk, whether it was new)``. ``encoded``: its
        :func:`harness.results.encode` when the caller has it (Note [A run encoded once]
        in harness/results.py)."""
        from sqlalchemy import select

        from harness.results import encode
        from harness.store.series import series_of

        if role not in ROLES:
            raise ValueError(f"role {role!r}; expected one of {ROLES}")
        encoded = encode(run) if encoded is None else encoded
        head = json.dumps(encoded.head, separators=(",", ":"), allow_nan=False).encode()
        body = encoded.compact_records().encode()
        digest = hashlib.sha256(b"\0".join([head, body, run_id.encode(), shard.encode(),
                                            role.encode()])).hexdigest()
        fp = run.fingerprint
        counts: dict[str, int] = {}
        for rec in run.records.values():
            counts[str(rec.status)] = counts.get(str(rec.status), 0) + 1
        verdict = (run.verdict or {}).get("verdict", "") if isinstance(run.verdict, dict) else ""
        row = dict(digest=digest, run_id=run_id, shard=shard, role=role,
                   device_type=str(fp.get("device_type", "")),
                   device_slug=str(fp.get("device_slug") or ""), stack_id=str(fp["stack_id"]),
                   host=str(fp.get("host") or ""), started=run.started or "",
                   finished=run.finished or "", complete=bool(run.complete),
                   faulted=bool(run.faults), verdict=str(verdict).upper()[:10],
                   n_records=len(run.records), counts=json.dumps(counts, sort_keys=True),
                   source=str(source), stored_at=_utc_now(),
                   head=zlib.compress(head, schema.COMPRESSION),
                   body=zlib.compress(body, schema.COMPRESSION))
        series = series_of(run.records)
        conn = self._write()
        try:
            with conn.begin():
                found = conn.execute(select(schema.runs.c.pk).where(
                    schema.runs.c.digest == digest)).scalar()
                if found is not None:
                    return int(found), False
                pk = int(conn.execute(schema.runs.insert().values(**row)).inserted_primary_key[0])
                record_ids = dict(zip(run.records, schema.name_ids(
                    itertools.repeat("r"), run.records)))
                if run.records:
                    _insert_many(conn, schema.records.insert(), ("run_pk", "record", "status"),
                                 [(pk, record_ids[rid], str(rec.status))
                                  for rid, rec in run.records.items()])
                self._put_series(conn, pk, series, record_ids)
                if durations:
                    conn.execute(schema.durations.insert(), [
                        {"run_pk": pk, "test": test, "seconds": float(seconds)}
                        for test, seconds in sorted(durations.items())])
            return pk, True
        except StoreError:
            self._layouts.clear()
            raise
        except Exception as exc:  # noqa: BLE001 - a driver error: one message with the fix
            self._layouts.clear()  # layouts written in the rolled-back transaction are gone
            raise self.error("cannot store the run", exc) from None
        finally:
            conn.info.pop("write", None)
            conn.close()

    def _put_series(self, conn, pk: int, series: list, record_ids: dict[str, int]) -> None:
        """The run's series values, as differences from its layout's reference (Note [What
        the store keeps]); a new layout is stored with every name it holds and this run's
        values as its reference.

        The reference is read back from the store, never assumed: on PostgreSQL a
        concurrent writer may have stored the same layout first (its insert wins, ours does
        nothing), and a run's differences must be from what is stored."""
        import numpy as np
        from sqlalchemy import select

        lay = schema.series_layouts
        kind_of, name_of, value_of, control_of = ([item[k] for item in series] for k in range(4))
        kinds = "".join(kind_of).encode("ascii")
        text = "\0".join([*map(str.__add__, kind_of, name_of), "", *sorted(record_ids)])
        digest = hashlib.sha256(text.encode()).hexdigest()  # the names, not their ids
        vals = np.array(value_of, dtype="<f8")
        ctl = np.full(len(series), np.nan, dtype="<f8")
        for k, control in enumerate(control_of):
            if control is not None:
                ctl[k] = control
        reference = self._layouts.get(digest)
        if reference is None:
            query = select(lay.c.ref_vals, lay.c.ref_controls).where(lay.c.digest == digest)
            found = conn.execute(query).first()
            if found is None:
                ids = schema.name_ids(kind_of, name_of)
                names = [(i, "r", rid) for rid, i in record_ids.items()]
                names += zip(ids, kind_of, name_of)
                _insert_many(conn, _insert_ignoring(conn, schema.names), ("id", "kind", "name"),
                             names)
                conn.execute(_insert_ignoring(conn, lay).values(
                    digest=digest, ids=schema.pack(np.array(ids, dtype="<i8")),
                    kinds=schema.pack(np.frombuffer(kinds, dtype=np.uint8)),
                    ref_vals=schema.pack(vals), ref_controls=schema.pack(ctl)))
                found = conn.execute(query).one()
            reference = self._layouts[digest] = (schema.unpack(found.ref_vals, "<f8"),
                                                 schema.unpack(found.ref_controls, "<f8"))
        pos, moved, moved_ctl = schema.differences(*reference, vals, ctl)
        conn.execute(schema.series_diffs.insert().values(
            run_pk=pk, layout=digest, pos=schema.pack(pos), vals=schema.pack(moved),
            controls=schema.pack(moved_ctl)))

    # ------------------------------------------------------------------ reading

    def runs(self, *, run_id: Optional[str] = None, device_type: Optional[str] = None,
             device_slug: Optional[str] = None, stack_id: Optional[str] = None,
             host: Optional[str] = None, since: Optional[str] = None,
             until: Optional[str] = None, role: Optional[str] = "run",
             record: Optional[str] = None) -> list[StoredRun]:
        """Stored runs (oldest first) that match every filter given; ``record``: runs that
        hold this record id."""
        from sqlalchemy import select

        t = schema.runs
        query = select(*[t.c[name] for name in _ROW_COLUMNS])
        for column, value in (("run_id", run_id), ("device_type", device_type),
                              ("device_slug", device_slug), ("stack_id", stack_id),
                              ("host", host), ("role", role)):
            if value is not None:
                query = query.where(t.c[column] == value)
        if since:
            query = query.where(t.c.started >= since)
        if until:
            query = query.where(t.c.started <= until)
        if record is not None:
            query = query.where(t.c.pk.in_(select(schema.records.c.run_pk).where(
                schema.records.c.record == schema.name_id("r", record))))
        query = query.order_by(t.c.started, t.c.pk)
        with self._reading("cannot list runs") as conn:
            rows = conn.execute(query).all()
        return [StoredRun(**{**row._mapping, "counts": json.loads(row.counts)}) for row in rows]

    def load(self, pk: int):
        """The stored run ``pk`` as :class:`harness.results.RunResults`, read through
        :meth:`harness.results.RunResults.from_json` (migrations included)."""
        from sqlalchemy import select

        from harness.results import RunResults

        with self._reading("cannot read a run") as conn:
            row = conn.execute(select(schema.runs.c.head, schema.runs.c.body).where(
                schema.runs.c.pk == pk)).first()
        if row is None:
            raise StoreError(f"store {mask(self.url)}: no run {pk}")
        doc = json.loads(zlib.decompress(row.head))
        doc["records"] = json.loads(zlib.decompress(row.body))
        return RunResults.from_json(doc, source=f"{mask(self.url)} run {pk}")

    def record_statuses(self, record: str) -> list[tuple[int, str]]:
        """``(run pk, status)`` of one record id in every stored run that has it."""
        from sqlalchemy import select

        r = schema.records
        with self._reading("cannot read records") as conn:
            return [tuple(row) for row in conn.execute(
                select(r.c.run_pk, r.c.status).where(
                    r.c.record == schema.name_id("r", record)).order_by(r.c.run_pk)).all()]

    def scan_series(self, pks: Sequence[int], *, controls: str = "all"):
        """History's values, one stored run at a time (so a year of nightlies is never in
        memory at once): a :class:`SeriesRow` per run in ``pks`` that has series, in the
        order of ``pks``. ``controls="benchmarks"``: no controls for a run whose layout
        has no benchmark (``"none"``: for any run), and its own are not decompressed."""
        from sqlalchemy import select

        if controls not in ("all", "benchmarks", "none"):
            raise ValueError(f"controls={controls!r}; expected 'all', 'benchmarks' or 'none'")
        sd, lay = schema.series_diffs, schema.series_layouts
        layouts: dict[str, tuple] = {}
        row_of = {pk: i for i, pk in enumerate(pks)}
        with self._reading("cannot read series") as conn:
            for start in range(0, len(pks), 64):
                chunk = list(pks[start:start + 64])
                columns = [sd.c.run_pk, sd.c.layout, sd.c.pos, sd.c.vals] + (
                    [sd.c.controls] if controls != "none" else [])
                rows = conn.execute(select(*columns).where(sd.c.run_pk.in_(chunk))).all()
                for row in sorted(rows, key=lambda r: row_of[r.run_pk]):
                    if row.layout not in layouts:
                        found = conn.execute(select(
                            lay.c.ids, lay.c.kinds, lay.c.ref_vals, lay.c.ref_controls).where(
                            lay.c.digest == row.layout)).one()
                        kinds = schema.unpack(found.kinds, "u1")
                        layouts[row.layout] = (schema.unpack(found.ids, "<i8"), kinds,
                                               bool((kinds == ord("b")).any()),
                                               schema.unpack(found.ref_vals, "<f8"),
                                               schema.unpack(found.ref_controls, "<f8"))
                    ids, kinds, has_bench, ref_vals, ref_controls = layouts[row.layout]
                    wanted = controls == "all" or (controls == "benchmarks" and has_bench)
                    yield SeriesRow(row_of[row.run_pk], row.layout, ids, kinds, ref_vals,
                                    ref_controls if wanted else None,
                                    schema.unpack(row.pos, "<i4"), schema.unpack(row.vals, "<f8"),
                                    schema.unpack(row.controls, "<f8") if wanted else None)

    def names_of(self, ids: Iterable[int]) -> dict[int, str]:
        """Name ids -> their names."""
        from sqlalchemy import select

        wanted = sorted({int(i) for i in ids})
        out: dict[int, str] = {}
        with self._reading("cannot read names") as conn:
            for start in range(0, len(wanted), 500):
                out.update(conn.execute(select(schema.names.c.id, schema.names.c.name).where(
                    schema.names.c.id.in_(wanted[start:start + 500]))).all())
        return out

    def durations(self, pks: Optional[Sequence[int]] = None) -> dict[str, float]:
        """Each test's seconds in the newest stored run that timed it (``pks``: among
        these runs), for a shard plan."""
        from sqlalchemy import select

        d, t = schema.durations, schema.runs
        query = select(d.c.test, d.c.seconds).join(t, t.c.pk == d.c.run_pk).order_by(
            t.c.started, t.c.pk)
        if pks is not None:
            query = query.where(d.c.run_pk.in_(list(pks)))
        with self._reading("cannot read durations") as conn:
            return {test: seconds for test, seconds in conn.execute(query).all()}

    def baseline(self, device_type: str, device_slug: str, stack_id: str):
        """The newest run stored as the baseline of this stack (``store import
        --as-baseline``), or None."""
        found = self.runs(device_type=device_type, device_slug=device_slug,
                          stack_id=stack_id, role="baseline")
        return self.load(found[-1].pk) if found else None

    def _reading(self, what: str):
        store = self

        class _Reading:
            def __enter__(self):
                try:
                    self.conn = store.engine.connect()
                except Exception as exc:  # noqa: BLE001
                    raise store.error(what, exc) from None
                return self.conn

            def __exit__(self, kind, exc, tb):
                self.conn.close()
                if exc is not None and not isinstance(exc, StoreError) \
                        and type(exc).__module__.startswith(("sqlalchemy", "psycopg", "sqlite3")):
                    raise store.error(what, exc) from None
                return False

        return _Reading()


# Note [SQLite's page cache]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A run's first write of a layout interns ~290,000 names (a default run's record ids and
# metric series) whose ids are hashes, so each insert lands at a random place of the
# primary key's B-tree; SQLite's default page cache (2 MB) holds a fraction of the tree
# and most inserts read a page back from the file. A 64 MiB cache per connection (memory
# SQLite takes only as the file needs it) keeps the pages: the driver's executemany of a
# default run's names, 0.95-1.6 s -> 0.7-0.8 s on an Intel Xeon (docs/benchmarks.md).
# Inserting in id order as well saved no more than the sort cost. PostgreSQL keeps its own
# buffers.


def _insert_many(conn, statement, keys: tuple[str, ...], rows: list[tuple]) -> None:
    """Insert ``rows`` (tuples of the columns ``keys``) with one executemany of the driver.

    Note [Many rows, one statement]: a run's first write of a layout interns about 250,000
    names; through ``conn.execute(statement, rows)`` SQLAlchemy builds the parameters of
    every row in Python (1.0 s of a 3.0 s write on a Zen 5), while the driver's own
    executemany takes 0.5 s. So the statement is compiled once for the connection's
    dialect, as SQLAlchemy would, and the rows go to the driver in its paramstyle
    (positional tuples or named dicts): the same SQL on every backend.
    """
    if not rows:
        return
    compiled = statement.compile(dialect=conn.dialect, column_keys=list(keys))
    if compiled.positional:
        order = tuple(keys.index(compiled.binds[name].key) for name in compiled.positiontup)
        params: list = (rows if order == tuple(range(len(keys)))
                        else [tuple(row[i] for i in order) for row in rows])
    else:
        params = [dict(zip(keys, row)) for row in rows]
    conn.exec_driver_sql(compiled.string, params)


def _insert_ignoring(conn, table):
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table).on_conflict_do_nothing()


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _version_table():
    from sqlalchemy import Column, MetaData, PrimaryKeyConstraint, String, Table

    return Table("alembic_version", MetaData(), Column("version_num", String(32),
                                                       nullable=False),
                 PrimaryKeyConstraint("version_num", name="alembic_version_pkc"))


_VERSION = _version_table()


def _revision(conn) -> Optional[str]:
    from sqlalchemy import inspect, select

    if not inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(select(_VERSION.c.version_num)).scalar()


def alembic_config():
    """Alembic's configuration for the store's migrations (no alembic.ini needed)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    return config
