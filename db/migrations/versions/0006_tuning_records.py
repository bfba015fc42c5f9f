"""MetaSchedule tuning: workloads and records in the results database; tuning provenance on builds

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 11:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tuning_workloads",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("workload_hash", sa.String(32), nullable=False),
        sa.Column("module_equality", sa.String(32), nullable=False),
        sa.Column("target_key", sa.String(64), nullable=False),
        sa.Column("target", sa.JSON(), nullable=False),
        sa.Column("board_key", sa.String(100), nullable=False),
        sa.Column("tvm_version", sa.String(64), nullable=False),
        sa.Column("mod_b64", sa.Text(), nullable=False),
        sa.Column("task_name", sa.String(200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint(
            "workload_hash", "module_equality", "target_key", "board_key", "tvm_version", name="uq_tuning_workloads"
        ),
    )
    op.create_index(
        "ix_tuning_workloads_scope", "tuning_workloads", ["target_key", "board_key", "tvm_version", "module_equality"]
    )
    op.create_table(
        "tuning_workload_models",
        sa.Column("workload_id", sa.Integer(), sa.ForeignKey("tuning_workloads.id"), primary_key=True),
        sa.Column("model_name", sa.String(200), primary_key=True),
    )
    op.create_table(
        "tuning_records",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("workload_id", sa.Integer(), sa.ForeignKey("tuning_workloads.id"), nullable=False),
        sa.Column("record_hash", sa.String(64), nullable=False),
        sa.Column("trace", sa.JSON(), nullable=False),
        sa.Column("run_secs", sa.JSON(), nullable=True),
        sa.Column("target", sa.JSON(), nullable=True),
        sa.Column("args_info", sa.JSON(), nullable=True),
        sa.Column("mean_run_s", sa.Float(), nullable=False),
        sa.Column("valid", sa.Boolean(), nullable=False),
        sa.Column("source", sa.String(200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("workload_id", "record_hash", name="uq_tuning_records"),
    )
    op.create_index("ix_tuning_records_top", "tuning_records", ["workload_id", "valid", "mean_run_s"])
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tuning", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("tuning_budget", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("tuning_trials", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("tuning_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.drop_column("tuning_s")
        batch_op.drop_column("tuning_trials")
        batch_op.drop_column("tuning_budget")
        batch_op.drop_column("tuning")
    op.drop_index("ix_tuning_records_top", table_name="tuning_records")
    op.drop_table("tuning_records")
    op.drop_table("tuning_workload_models")
    op.drop_index("ix_tuning_workloads_scope", table_name="tuning_workloads")
    op.drop_table("tuning_workloads")
