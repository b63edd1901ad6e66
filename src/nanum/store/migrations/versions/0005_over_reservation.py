"""Backfill over a reservation: `jobs.over_reservation` marks a running job started on GPUs reserved for a
blocked job, which preempts it when it can start (`+backfill+preempt`, nanum.core.scheduler).

Revision ID: 0005_over_reservation
Revises: 0004_bursts
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_over_reservation"
down_revision = "0004_bursts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("over_reservation", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("over_reservation")
