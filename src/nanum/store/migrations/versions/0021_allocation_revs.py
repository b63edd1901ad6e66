"""An allocation inserted or deleted stamps its job's row (`nanum.store.revs`): the scheduler's tick then reads
allocations only for the jobs written since its last one, not every GPU of the fleet (8,000 rows at 1,000 nodes).

Revision ID: 0021_allocation_revs
Revises: 0020_dependent_index
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

from nanum.store import revs

revision = "0021_allocation_revs"
down_revision = "0020_dependent_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    revs.create_allocation_triggers(op.get_bind())


def downgrade() -> None:
    revs.drop_allocation_triggers(op.get_bind())
