"""Jobs keep whether they go back to the queue when a node they run on is lost (`requeue`, default true;
`nanum submit --no-requeue` fails them instead).

Revision ID: 0016_requeue
Revises: 0015_sessions
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_requeue"
down_revision = "0015_sessions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("requeue", sa.Boolean(), nullable=False, server_default=sa.true()))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("requeue")
