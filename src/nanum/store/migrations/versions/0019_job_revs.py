"""Jobs get `rev`, stamped by the database on every write (`nanum.store.revs`): the scheduler's tick reads only
the job rows written since its last one.

Revision ID: 0019_job_revs
Revises: 0018_settled_segments
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nanum.store import revs

revision = "0019_job_revs"
down_revision = "0018_settled_segments"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("rev", sa.BigInteger(), nullable=False, server_default="0"))
    op.create_index("ix_jobs_rev", "jobs", ["rev"])
    revs.create_job_triggers(op.get_bind())


def downgrade() -> None:
    revs.drop_job_triggers(op.get_bind())
    op.drop_index("ix_jobs_rev", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("rev")
