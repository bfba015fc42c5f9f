"""builds: the layout axis' conversion (layout, convs converted, transposes added) as the build records it

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 09:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: builds of sweeps without a layout axis (and every build before it) have none.
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.add_column(sa.Column("layout", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.drop_column("layout")
