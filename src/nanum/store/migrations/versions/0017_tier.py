"""Jobs get a `tier` (0..9, default 0) that only admins set: every queue order puts a higher tier first. Jobs
already stored are in tier 0, where every job was before.

Revision ID: 0017_tier
Revises: 0016_requeue
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_tier"
down_revision = "0016_requeue"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("tier", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("tier")
