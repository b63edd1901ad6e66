"""The initial schema: labs, users, memberships, nodes, jobs, allocations, events, usage.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _id() -> sa.Column[int]:
    return sa.Column("id", sa.Integer(), primary_key=True)


def _usage_columns() -> list[sa.Column[float]]:
    return [
        sa.Column("decayed_usage", sa.Float(), nullable=False),
        sa.Column("decayed_at", sa.Float(), nullable=False),
        sa.Column("created", sa.Float(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "labs",
        _id(),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("guaranteed_gpus", sa.Integer()),
        sa.Column("max_gpus", sa.Integer()),
        sa.Column("max_running_jobs", sa.Integer()),
        sa.Column("monthly_gpu_hours", sa.Float()),
        sa.Column("weight", sa.Float(), nullable=False),
        *_usage_columns(),
    )
    op.create_table(
        "nodes",
        _id(),
        sa.Column("name", sa.String(128), nullable=False, unique=True),
        sa.Column("token_hash", sa.String(64), unique=True),
        sa.Column("hostname", sa.String(255)),
        sa.Column("inventory", sa.JSON()),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("last_seen", sa.Float()),
        sa.Column("desired_version", sa.Integer(), nullable=False),
        sa.Column("created", sa.Float(), nullable=False),
    )
    op.create_table(
        "usage",
        sa.Column("month", sa.String(7), primary_key=True),
        sa.Column("kind", sa.String(8), primary_key=True),
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("gpu_seconds", sa.Float(), nullable=False),
    )
    op.create_table(
        "users",
        _id(),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("unix_user", sa.String(64)),
        sa.Column("default_lab_id", sa.Integer(), sa.ForeignKey("labs.id")),
        sa.Column("max_gpus", sa.Integer()),
        sa.Column("max_running_jobs", sa.Integer()),
        sa.Column("monthly_gpu_hours", sa.Float()),
        *_usage_columns(),
    )
    op.create_table(
        "memberships",
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("lab_id", sa.Integer(), sa.ForeignKey("labs.id", ondelete="CASCADE"), primary_key=True),
    )
    op.create_table(
        "jobs",
        _id(),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("lab_id", sa.Integer(), sa.ForeignKey("labs.id"), nullable=False),
        sa.Column("command", sa.JSON(), nullable=False),
        sa.Column("workdir", sa.Text(), nullable=False),
        sa.Column("env", sa.JSON(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sa.String(64)),
        sa.Column("cpus", sa.Integer(), nullable=False),
        sa.Column("memory_mb", sa.Integer()),
        sa.Column("time_limit_s", sa.Float()),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("preemptible", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text()),
        sa.Column("reason_code", sa.String(32)),
        sa.Column("estimated_start", sa.Float()),
        sa.Column("borrowing", sa.Boolean(), nullable=False),
        sa.Column("stop", sa.String(16)),
        sa.Column("allocation", sa.JSON(), nullable=False),
        sa.Column("lost_from", sa.JSON()),
        sa.Column("charged_until", sa.Float()),
        sa.Column("submit_time", sa.Float(), nullable=False),
        sa.Column("start_time", sa.Float()),
        sa.Column("end_time", sa.Float()),
        sa.Column("exit_code", sa.Integer()),
        sa.Column("pid", sa.Integer()),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("attained_gpu_seconds", sa.Float(), nullable=False),
    )
    op.create_index("ix_jobs_state_end", "jobs", ["state", "end_time"])
    op.create_index("ix_jobs_user_state", "jobs", ["user_id", "state"])
    op.create_table(
        "allocations",
        _id(),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("node_id", sa.Integer(), sa.ForeignKey("nodes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.UniqueConstraint("node_id", "gpu_index", name="uq_allocations_gpu"),
    )
    op.create_index("ix_allocations_job_id", "allocations", ["job_id"])
    op.create_table(
        "events",
        _id(),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
    )
    op.create_index("ix_events_job_id", "events", ["job_id"])


def downgrade() -> None:
    for table in ("events", "allocations", "jobs", "memberships", "users", "usage", "nodes", "labs"):
        op.drop_table(table)
