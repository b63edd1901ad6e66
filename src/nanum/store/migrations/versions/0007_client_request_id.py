"""Idempotent submission: `jobs.client_request_id`, an id the client picks per submission, UNIQUE per user, so a
submission sent again (a retry after a lost answer) returns the job it made instead of making a second one.
NULLs are distinct: jobs submitted without an id never collide.

Revision ID: 0007_client_request_id
Revises: 0006_cpu_only_parts
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_client_request_id"
down_revision = "0006_cpu_only_parts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("client_request_id", sa.String(64)))
        batch.create_unique_constraint("uq_jobs_user_request", ["user_id", "client_request_id"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint("uq_jobs_user_request", type_="unique")
        batch.drop_column("client_request_id")
