"""An index for the fleet matrix: the runs of a stack across devices.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_runs_stack", "runs", ["stack_id", "device_slug"])


def downgrade() -> None:
    op.drop_index("ix_runs_stack", "runs")
