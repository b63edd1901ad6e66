"""A job's pid is no longer stored: nothing read it, and recording it made the heartbeat that first reports a job
its agent just started a write (the agent keeps the pid; it still reports it).

Revision ID: 0022_job_pid_dropped
Revises: 0021_allocation_revs
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022_job_pid_dropped"
down_revision = "0021_allocation_revs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_column("jobs", "pid")  # SQLite 3.35 and later drop a column in place: its triggers stay


def downgrade() -> None:
    op.add_column("jobs", sa.Column("pid", sa.Integer()))
