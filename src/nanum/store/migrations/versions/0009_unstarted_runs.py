"""Repair jobs left `running` without a GPU or node: before 0006 a job that asked for no GPU (or one whose GPUs were
taken while it started) could be marked running while its start was never completed. No agent ever ran it, so no
heartbeat could end it: those being cancelled are cancelled, the others go back to the queue.

Revision ID: 0009_unstarted_runs
Revises: 0008_node_inventory
Create Date: 2026-12-04
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "0009_unstarted_runs"
down_revision = "0008_node_inventory"
branch_labels = None
depends_on = None

_HOLDS_NOTHING = "state = 'running' AND NOT EXISTS (SELECT 1 FROM allocations a WHERE a.job_id = jobs.id)"


def upgrade() -> None:
    now = time.time()
    op.execute(sa.text(
        f"UPDATE jobs SET state = 'cancelled', end_time = :now, stop = NULL, pid = NULL, "
        f"reason = 'cancelled; it had never reached a node' WHERE {_HOLDS_NOTHING} AND stop = 'cancel'"
    ).bindparams(now=now))
    op.execute(sa.text(
        f"UPDATE jobs SET state = 'pending', start_time = NULL, stop = NULL, pid = NULL, queued_at = :now, "
        f"reason = 'requeued: its start had never reached a node; waiting to run', reason_code = 'queued' "
        f"WHERE {_HOLDS_NOTHING}"
    ).bindparams(now=now))


def downgrade() -> None:
    pass  # the repaired jobs stay repaired
