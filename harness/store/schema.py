"""The store's tables (SQLAlchemy Core), one definition for SQLite and PostgreSQL.

Note [What the store keeps]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
A run is one row of ``runs``: the columns the views filter on (device type and slug, stack,
host, times, run id and shard, honesty, verdict level) and two compressed JSON documents
that hold the results file losslessly: ``head`` (every run-level field of docs/schema.md)
and ``body`` (the records, as ``RunResults.to_json`` writes them). ``records`` has one row
per record (run, record id, status), so "which runs had this record, with what status" is
a query. Record ids and series names are stored once (``names``), keyed by a 64-bit hash
of the name (:func:`name_id`), so a writer needs no lookup to know an id. History reads
the numeric value of every history series per run (a benchmark's median, every other
record's finite metrics) in the order of a layout (``series_layouts``): the run's series
ids, stored once for every night that has the same ones, with the values and host
controls of the first run stored in that layout (its reference). A run keeps in
``series_diffs`` only the positions where its value or control differs from the
reference, and their values: a deterministic kernel's error is the same every night, so a
nightly of the default run keeps a few thousand of its ~217,000 values, and a year of
nightlies is read without parsing any JSON and without decompressing what did not move
(revision 0003; before it, ``series_values`` kept every value of every run in the order
of ``layouts``).
``durations`` keeps each test's seconds, from which a shard plan (pytest-split) is built.

Changing a table: add an Alembic revision under migrations/versions (``down_revision`` the
current head), change this file to match, set :data:`HEAD` to the new revision;
tests/test_store.py proves the migrations build exactly these tables.
"""

from __future__ import annotations

import hashlib
import zlib

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)

COMPRESSION = 3
"""zlib level of every stored blob."""

HEAD = "0003"
"""The newest schema revision (the last Alembic revision in migrations/versions)."""

metadata = MetaData()

runs = Table(
    "runs", metadata,
    Column("pk", Integer, primary_key=True, autoincrement=True),
    Column("digest", String(64), nullable=False, unique=True),  # sha256 of the document
    Column("run_id", String(200), nullable=False),
    Column("shard", String(40), nullable=False),  # "I/N" (pytest-split group of splits)
    Column("role", String(20), nullable=False),  # "run" or "baseline"
    Column("device_type", String(20), nullable=False),
    Column("device_slug", String(200), nullable=False),
    Column("stack_id", String(100), nullable=False),
    Column("host", String(200), nullable=False),
    Column("started", String(40), nullable=False),
    Column("finished", String(40), nullable=False),
    Column("complete", Boolean, nullable=False),
    Column("faulted", Boolean, nullable=False),
    Column("verdict", String(10), nullable=False),  # NO-GO / REVIEW / GO / "" (not judged)
    Column("n_records", Integer, nullable=False),
    Column("counts", Text, nullable=False),  # JSON: records per status
    Column("source", Text, nullable=False),  # the results file it came from
    Column("stored_at", String(40), nullable=False),
    Column("head", LargeBinary, nullable=False),  # zlib(JSON): run-level fields
    Column("body", LargeBinary, nullable=False),  # zlib(JSON): records
    Index("ix_runs_series", "device_type", "device_slug", "stack_id", "started"),
    Index("ix_runs_run_id", "run_id", "shard"),
    Index("ix_runs_host", "host"),
    Index("ix_runs_stack", "stack_id", "device_slug"),  # revision 0002
)

names = Table(
    "names", metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),  # name_id(kind, name)
    Column("kind", String(1), nullable=False),  # r: record id, m: metric series, b: benchmark
    Column("name", Text, nullable=False),
)

series_layouts = Table(  # revision 0003 (replaces layouts, adding the reference)
    "series_layouts", metadata,
    Column("digest", String(64), primary_key=True),  # sha256 of the series and record names
    Column("ids", LargeBinary, nullable=False),  # zlib(int64 little-endian): series name ids
    Column("kinds", LargeBinary, nullable=False),  # zlib(ASCII): each series' kind (b or m)
    # the first stored run's values and controls (zlib(float64 LE), NaN: no control), what
    # every run of the layout is stored as a difference from
    Column("ref_vals", LargeBinary, nullable=False),
    Column("ref_controls", LargeBinary, nullable=False),
)

records = Table(
    "records", metadata,
    Column("run_pk", Integer, ForeignKey("runs.pk", ondelete="CASCADE"), nullable=False),
    Column("record", BigInteger, nullable=False),  # names.id of the record id
    Column("status", String(12), nullable=False),
    Index("ix_records_run", "run_pk"),
    Index("ix_records_record", "record", "run_pk"),
)

series_diffs = Table(  # revision 0003 (replaces series_values)
    "series_diffs", metadata,
    Column("run_pk", Integer, ForeignKey("runs.pk", ondelete="CASCADE"), primary_key=True),
    Column("layout", String(64), ForeignKey("series_layouts.digest"), nullable=False),
    Column("pos", LargeBinary, nullable=False),  # zlib(int32 LE): positions that differ
    Column("vals", LargeBinary, nullable=False),  # zlib(float64 LE): the values there
    Column("controls", LargeBinary, nullable=False),  # zlib(float64 LE): controls there
)

durations = Table(
    "durations", metadata,
    Column("run_pk", Integer, ForeignKey("runs.pk", ondelete="CASCADE"), nullable=False),
    Column("test", Text, nullable=False),
    Column("seconds", Float, nullable=False),
    Index("ix_durations_run", "run_pk"),
)


def name_id(kind: str, name: str) -> int:
    """The id of a record id or series name: the first 8 bytes of its BLAKE2b hash, as a
    signed 64-bit integer (a collision among a million names has odds near 3e-8)."""
    return name_ids((kind,), (name,))[0]


def name_ids(kinds, names) -> list[int]:
    """:func:`name_id` of each ``(kind, name)`` of two parallel sequences, in order (the
    one definition of an id): the digests joined and read as one little-endian int64
    array (a run's first layout interns 250,000 names)."""
    import numpy as np

    blake2b = hashlib.blake2b
    joined = b"".join([blake2b(f"{kind}\0{name}".encode(), digest_size=8).digest()
                       for kind, name in zip(kinds, names)])
    return np.frombuffer(joined, dtype="<i8").tolist()


def pack(array) -> bytes:
    """A numpy array as stored: zlib of its little-endian bytes."""
    return zlib.compress(array.tobytes(), COMPRESSION)


def unpack(blob: bytes, dtype: str):
    """The array :func:`pack` stored (``dtype``: ``"<f8"``, ``"<i4"``, ``"<i8"``, ``"u1"``)."""
    import numpy as np

    return np.frombuffer(zlib.decompress(blob), dtype=dtype)


def differences(ref_vals, ref_controls, vals, controls):
    """``(positions, values, controls)`` where a run's series differ from its layout's
    reference (a control differs unless both are equal or both NaN; values are finite)."""
    import numpy as np

    same_control = (controls == ref_controls) | (np.isnan(controls) & np.isnan(ref_controls))
    pos = np.flatnonzero((vals != ref_vals) | ~same_control).astype("<i4")
    return pos, vals[pos], controls[pos]
