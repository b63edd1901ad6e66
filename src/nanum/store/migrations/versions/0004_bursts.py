"""Bursts: `jobs.burst`, the first job of the burst a job was submitted in (nanum.core.bursts; None: it is that
first job, or alone), so the queue order can learn from a burst's running members; an index on (user, submit
time) to find a new job's burst.

Revision ID: 0004_bursts
Revises: 0003_monitoring
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_bursts"
down_revision = "0003_monitoring"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("burst", sa.Integer()))
    op.create_index("ix_jobs_user_submit", "jobs", ["user_id", "submit_time"])


def downgrade() -> None:
    op.drop_index("ix_jobs_user_submit", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("burst")
