"""indexes for the analysis queries (results best / query at a million rows)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29 16:20:00
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        # `results best`: the newest sweep per (model, board key) among ok jobs, answered from the index alone.
        batch_op.create_index("ix_jobs_rank", ["status", "model_name", "board_key", "sweep_id"], unique=False)
        # --since / --until
        batch_op.create_index("ix_jobs_finished_at", ["finished_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_finished_at")
        batch_op.drop_index("ix_jobs_rank")
