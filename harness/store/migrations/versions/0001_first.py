"""The first store schema: runs, names, layouts, records, series_values, durations.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("pk", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("shard", sa.String(40), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("device_type", sa.String(20), nullable=False),
        sa.Column("device_slug", sa.String(200), nullable=False),
        sa.Column("stack_id", sa.String(100), nullable=False),
        sa.Column("host", sa.String(200), nullable=False),
        sa.Column("started", sa.String(40), nullable=False),
        sa.Column("finished", sa.String(40), nullable=False),
        sa.Column("complete", sa.Boolean, nullable=False),
        sa.Column("faulted", sa.Boolean, nullable=False),
        sa.Column("verdict", sa.String(10), nullable=False),
        sa.Column("n_records", sa.Integer, nullable=False),
        sa.Column("counts", sa.Text, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("stored_at", sa.String(40), nullable=False),
        sa.Column("head", sa.LargeBinary, nullable=False),
        sa.Column("body", sa.LargeBinary, nullable=False),
    )
    op.create_index("ix_runs_series", "runs", ["device_type", "device_slug", "stack_id",
                                               "started"])
    op.create_index("ix_runs_run_id", "runs", ["run_id", "shard"])
    op.create_index("ix_runs_host", "runs", ["host"])
    op.create_table(
        "names",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("kind", sa.String(1), nullable=False),
        sa.Column("name", sa.Text, nullable=False),
    )
    op.create_table(
        "layouts",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("ids", sa.LargeBinary, nullable=False),
        sa.Column("kinds", sa.LargeBinary, nullable=False),
    )
    op.create_table(
        "records",
        sa.Column("run_pk", sa.Integer, sa.ForeignKey("runs.pk", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("record", sa.BigInteger, nullable=False),
        sa.Column("status", sa.String(12), nullable=False),
    )
    op.create_index("ix_records_run", "records", ["run_pk"])
    op.create_index("ix_records_record", "records", ["record", "run_pk"])
    op.create_table(
        "series_values",
        sa.Column("run_pk", sa.Integer, sa.ForeignKey("runs.pk", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("layout", sa.String(64), sa.ForeignKey("layouts.digest"), nullable=False),
        sa.Column("vals", sa.LargeBinary, nullable=False),
        sa.Column("controls", sa.LargeBinary, nullable=False),
    )
    op.create_table(
        "durations",
        sa.Column("run_pk", sa.Integer, sa.ForeignKey("runs.pk", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("test", sa.Text, nullable=False),
        sa.Column("seconds", sa.Float, nullable=False),
    )
    op.create_index("ix_durations_run", "durations", ["run_pk"])


def downgrade() -> None:
    for table in ("durations", "series_values", "records", "layouts", "names", "runs"):
        op.drop_table(table)
