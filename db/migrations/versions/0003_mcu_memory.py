"""builds: flash and RAM of microcontroller (aot-c) builds

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 16:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.add_column(sa.Column("flash_bytes", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("ram_bytes", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("memory", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.drop_column("memory")
        batch_op.drop_column("ram_bytes")
        batch_op.drop_column("flash_bytes")
