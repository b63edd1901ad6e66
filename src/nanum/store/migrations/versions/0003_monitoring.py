"""Monitoring: GPU readings at three resolutions, each node's latest reading, job tallies and idle state,
monitoring settings, user contacts.

Revision ID: 0003_monitoring
Revises: 0002_sharing
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_monitoring"
down_revision = "0002_sharing"
branch_labels = None
depends_on = None


def _floats(*names: str) -> list[sa.Column[float]]:
    return [sa.Column(name, sa.Float()) for name in names]


def upgrade() -> None:
    op.create_table(
        "gpu_samples",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("node_id", sa.Integer(), sa.ForeignKey("nodes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("res", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("util", sa.Float(), nullable=False),
        sa.Column("util_max", sa.Float(), nullable=False),
        sa.Column("memory_mb", sa.Float(), nullable=False),
        sa.Column("memory_max", sa.Integer(), nullable=False),
        *_floats("power_w", "temperature_c"),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.UniqueConstraint("node_id", "gpu_index", "res", "at", "job_id", name="uq_gpu_samples"),
    )
    op.create_index("ix_gpu_samples_job", "gpu_samples", ["job_id", "res", "at"])
    op.create_index("ix_gpu_samples_res_at", "gpu_samples", ["res", "at"])
    op.create_table(
        "node_live",
        sa.Column("node_id", sa.Integer(), sa.ForeignKey("nodes.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("gpus", sa.JSON(), nullable=False),
        sa.Column("jobs", sa.JSON(), nullable=False),
        sa.Column("rogue", sa.JSON(), nullable=False),
    )
    op.create_table(
        "job_stats",
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("readings", sa.Integer(), nullable=False),
        sa.Column("util_sum", sa.Float(), nullable=False),
        sa.Column("util_peak", sa.Float(), nullable=False),
        sa.Column("memory_sum", sa.Float(), nullable=False),
        sa.Column("memory_peak", sa.Integer(), nullable=False),
        sa.Column("cpu_sum", sa.Float(), nullable=False),
        sa.Column("idle", sa.Integer(), nullable=False),
        *_floats("first", "last", "util_now"),
        sa.Column("memory_now", sa.Integer()),
        sa.Column("cpu_now", sa.Float()),
        sa.Column("gpu_model", sa.String(64)),
        sa.Column("gpu_memory_mb", sa.Integer()),
        sa.Column("idle_stage", sa.String(16), nullable=False),
        *_floats("idle_since", "idle_last_time"),
        sa.Column("idle_last_memory", sa.Integer()),
        *_floats("idle_last_activity", "flagged_at"),
        sa.Column("marks", sa.JSON(), nullable=False),
        sa.Column("summary", sa.JSON()),
        sa.Column("timeline", sa.JSON()),
    )
    op.create_table(
        "monitor_settings",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.JSON(), nullable=False),
    )
    op.create_table(
        "contacts",
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("email", sa.String(255)),
        sa.Column("webhook", sa.String(1024)),
    )


def downgrade() -> None:
    for table in ("contacts", "monitor_settings", "job_stats", "node_live", "gpu_samples"):
        op.drop_table(table)
