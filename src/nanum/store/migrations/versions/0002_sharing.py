"""Fair sharing: per-lab preemption grace, checkpoints and work lost per job, run segments, the audit trail.

- `labs.grace_s`: seconds between SIGTERM and SIGKILL when the lab's jobs are stopped (None: the server's default).
- `jobs.last_checkpoint`, `jobs.lost_gpu_seconds`, `jobs.preemptions`, `jobs.queued_at` (when it last entered the
  queue: None means its submit time).
- `segments`: one row per charged interval of a job's allocation, the ground truth of `nanum usage`.
- `audit`: who changed which quota when, and budget warnings.

Revision ID: 0002_sharing
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_sharing"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("labs") as batch:
        batch.add_column(sa.Column("grace_s", sa.Float()))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("last_checkpoint", sa.Float()))
        batch.add_column(sa.Column("lost_gpu_seconds", sa.Float(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("preemptions", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("queued_at", sa.Float()))
    op.create_table(
        "segments",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("lab_id", sa.Integer(), sa.ForeignKey("labs.id"), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("start", sa.Float(), nullable=False),
        sa.Column("end", sa.Float(), nullable=False),
        sa.Column("wait_s", sa.Float()),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("lost_gpu_seconds", sa.Float(), nullable=False),
    )
    op.create_index("ix_segments_end", "segments", ["end"])
    op.create_index("ix_segments_job_id", "segments", ["job_id"])
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("changes", sa.JSON(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
    )
    op.create_index("ix_audit_subject", "audit", ["kind", "name", "time"])


def downgrade() -> None:
    op.drop_table("audit")
    op.drop_table("segments")
    with op.batch_alter_table("jobs") as batch:
        for column in ("queued_at", "preemptions", "lost_gpu_seconds", "last_checkpoint"):
            batch.drop_column(column)
    with op.batch_alter_table("labs") as batch:
        batch.drop_column("grace_s")
