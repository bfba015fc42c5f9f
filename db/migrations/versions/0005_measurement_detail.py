"""runs: sampling stop rule, phases, memory and board state; builds: static memory

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 11:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_RUN_COLUMNS = (
    ("warmup_runs", sa.Integer()),
    ("stop_reason", sa.String(length=16)),
    ("ci_rel", sa.Float()),
    ("sampling", sa.JSON()),
    ("upload_bytes", sa.Integer()),
    ("upload_s", sa.Float()),
    ("load_s", sa.Float()),
    ("first_ms", sa.Float()),
    ("phases", sa.JSON()),
    ("peak_mem_mb", sa.Float()),
    ("memory", sa.JSON()),
    ("board_state", sa.JSON()),
    ("warnings", sa.JSON()),
)
_BUILD_COLUMNS = (("params_bytes", sa.Integer()), ("planned_bytes", sa.Integer()))


def upgrade() -> None:
    # Nullable columns only: existing rows keep their figures and read as "not measured".
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for name, kind in _RUN_COLUMNS:
            batch_op.add_column(sa.Column(name, kind, nullable=True))
    with op.batch_alter_table("builds", schema=None) as batch_op:
        for name, kind in _BUILD_COLUMNS:
            batch_op.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("builds", schema=None) as batch_op:
        for name, _ in reversed(_BUILD_COLUMNS):
            batch_op.drop_column(name)
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for name, _ in reversed(_RUN_COLUMNS):
            batch_op.drop_column(name)
