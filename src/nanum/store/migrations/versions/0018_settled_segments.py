"""Segments get `settled`: heartbeats only insert them, and the scheduling leader charges their labs and users at
its next tick. Segments already stored were charged when they were written, so they come out settled.

Revision ID: 0018_settled_segments
Revises: 0017_tier
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_settled_segments"
down_revision = "0017_tier"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("segments", sa.Column("settled", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.execute(sa.text("UPDATE segments SET settled = :yes").bindparams(yes=True))
    op.create_index("ix_segments_unsettled", "segments", ["id"], postgresql_where=sa.text("NOT settled"),
                    sqlite_where=sa.text("NOT settled"))


def downgrade() -> None:
    op.drop_index("ix_segments_unsettled", table_name="segments")
    with op.batch_alter_table("segments") as batch:
        batch.drop_column("settled")
