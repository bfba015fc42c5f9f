"""runs.kernel_profile: per-kernel times from the board agent

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 16:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("kernel_profile", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("kernel_profile")
