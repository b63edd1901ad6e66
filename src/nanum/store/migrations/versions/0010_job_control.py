"""Arrays, dependencies, retries: `jobs.array_id` (the array's id: its first task's job id), `array_task` (the
task's index) and `array_limit` (how many of its tasks may run at once); `after` (the jobs it waits for, as
`[[kind, "ID" or "ID_TASK"], ...]`, kind one of started, ok, failed, any) and `keep_if_unmet`; `retries` (runs
left to requeue a failed job for) and `exits` (each ended run's exit code, in order).

Revision ID: 0010_job_control
Revises: 0009_unstarted_runs
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_job_control"
down_revision = "0009_unstarted_runs"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("array_id", sa.Integer()),
    ("array_task", sa.Integer()),
    ("array_limit", sa.Integer()),
    ("after", sa.JSON(none_as_null=True)),
    ("exits", sa.JSON(none_as_null=True)),
)


def upgrade() -> None:
    for name, kind in _COLUMNS:
        op.add_column("jobs", sa.Column(name, kind))
    op.add_column("jobs", sa.Column("keep_if_unmet", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.add_column("jobs", sa.Column("retries", sa.Integer(), nullable=False, server_default="0"))
    op.create_index("ix_jobs_array", "jobs", ["array_id", "array_task"])


def downgrade() -> None:
    op.drop_index("ix_jobs_array", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        for name in ("retries", "keep_if_unmet", *(n for n, _ in reversed(_COLUMNS))):
            batch.drop_column(name)
