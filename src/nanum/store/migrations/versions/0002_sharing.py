"""Fair sharing: per-lab preemption grace, checkpoints and lost work per job, run history, quota audit trail.

Revision ID: 0002_sharing
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

revision = "0002_sharing"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
