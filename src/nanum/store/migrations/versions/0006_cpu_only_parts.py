"""CPU-only jobs: `allocations.gpu_index` may be NULL. A job that needs no GPU on a node holds that node with one
row whose GPU is NULL (its CPUs and memory are counted there, and the node's agent is told to run it); NULLs are
distinct in the UNIQUE (node_id, gpu_index), so any number of such jobs share a node.

Revision ID: 0006_cpu_only_parts
Revises: 0005_over_reservation
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_cpu_only_parts"
down_revision = "0005_over_reservation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.alter_column("gpu_index", existing_type=sa.Integer(), nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM allocations WHERE gpu_index IS NULL")
    with op.batch_alter_table("allocations") as batch:
        batch.alter_column("gpu_index", existing_type=sa.Integer(), nullable=False)
