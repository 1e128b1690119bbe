"""Each run's series as differences from its layout's first run (Note [What the store
keeps] in harness/store/schema.py): ``layouts`` becomes ``series_layouts`` (with the
reference values and controls), ``series_values`` (every value of every run) becomes
``series_diffs`` (the positions that differ from the reference, and their values).

The stored values are rewritten, not dropped: each layout's reference is its first stored
run (the lowest run pk), and every run of it is stored as its differences from that (a
layout no run holds is not kept: the next run of it stores it again). One run is read at
a time, so the migration of a year of nightlies holds one night in memory. New tables rather than altered ones: SQLite would rebuild an altered table, and a rebuilt
parent of a foreign key cannot be dropped while the key is enforced.

Revision ID: 0003
Revises: 0002
"""

import zlib

import numpy as np
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

LEVEL = 3  # zlib level, as the store writes

_old_layouts = sa.table("layouts", sa.column("digest", sa.String),
                        sa.column("ids", sa.LargeBinary), sa.column("kinds", sa.LargeBinary))
_values = sa.table("series_values", sa.column("run_pk", sa.Integer),
                   sa.column("layout", sa.String), sa.column("vals", sa.LargeBinary),
                   sa.column("controls", sa.LargeBinary))


def _pack(array) -> bytes:
    return zlib.compress(np.ascontiguousarray(array).tobytes(), LEVEL)


def _floats(blob: bytes):
    return np.frombuffer(zlib.decompress(blob), dtype="<f8")


def upgrade() -> None:
    layouts = op.create_table(
        "series_layouts",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("ids", sa.LargeBinary, nullable=False),
        sa.Column("kinds", sa.LargeBinary, nullable=False),
        sa.Column("ref_vals", sa.LargeBinary, nullable=False),
        sa.Column("ref_controls", sa.LargeBinary, nullable=False),
    )
    diffs = op.create_table(
        "series_diffs",
        sa.Column("run_pk", sa.Integer, sa.ForeignKey("runs.pk", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("layout", sa.String(64), sa.ForeignKey("series_layouts.digest"),
                  nullable=False),
        sa.Column("pos", sa.LargeBinary, nullable=False),
        sa.Column("vals", sa.LargeBinary, nullable=False),
        sa.Column("controls", sa.LargeBinary, nullable=False),
    )
    conn = op.get_bind()
    runs = conn.execute(sa.select(_values.c.run_pk, _values.c.layout).order_by(
        _values.c.run_pk)).all()
    references: dict = {}
    for pk, layout in runs:
        row = conn.execute(sa.select(_values.c.vals, _values.c.controls).where(
            _values.c.run_pk == pk)).one()
        vals, controls = _floats(row.vals), _floats(row.controls)
        if layout not in references:
            old = conn.execute(sa.select(_old_layouts.c.ids, _old_layouts.c.kinds).where(
                _old_layouts.c.digest == layout)).one()
            conn.execute(layouts.insert().values(digest=layout, ids=old.ids, kinds=old.kinds,
                                                 ref_vals=row.vals, ref_controls=row.controls))
            references[layout] = (vals, controls)
        ref_vals, ref_controls = references[layout]
        same = (controls == ref_controls) | (np.isnan(controls) & np.isnan(ref_controls))
        pos = np.flatnonzero((vals != ref_vals) | ~same).astype("<i4")
        conn.execute(diffs.insert().values(run_pk=pk, layout=layout, pos=_pack(pos),
                                           vals=_pack(vals[pos]),
                                           controls=_pack(controls[pos])))
    op.drop_table("series_values")
    op.drop_table("layouts")


def downgrade() -> None:
    raise NotImplementedError("the store is never downgraded (Note [Store schema versions])")
