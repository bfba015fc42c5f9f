"""sweeps: the driver's host, pid and heartbeat, so that a sweep whose driver died reads as interrupted

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 22:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: sweeps recorded before have no driver facts and keep the status they show (tvmbench/core/liveness.py).
    with op.batch_alter_table("sweeps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("driver_host", sa.String(200), nullable=True))
        batch_op.add_column(sa.Column("driver_pid", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sweeps", schema=None) as batch_op:
        batch_op.drop_column("heartbeat_at")
        batch_op.drop_column("driver_pid")
        batch_op.drop_column("driver_host")
