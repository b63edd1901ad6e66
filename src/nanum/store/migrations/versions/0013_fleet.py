"""Node lifecycle, labels and owners; job constraints.

Nodes: `owner` (the lab that bought the node: its jobs come first there, others borrow it while idle),
`labels` (`{key: value}` set by an admin, matched by jobs' constraints), `gpu_model` (an admin's name for the node's
GPU model, replacing the one its agent reports), `drain_reason` (set while an admin, or a GPU health problem, keeps
new jobs off the node) and `gpu_health` (`{index: {"problem", "since"}}`: GPUs taken out of service for a health
problem the agent reported, until an admin resumes the node). Jobs: `gpu_memory_mb` (the least memory per GPU it
accepts), `constraints` (`["key=value", ...]` node labels it needs) and `torchrun` (each node's part runs its
command under torchrun with the rendezvous filled in). Multi-node jobs keep one log file per node beside the job's
interleaved log (`logs/<job>.<node>.log`), so no table is needed for them.

Revision ID: 0013_fleet
Revises: 0012_environments
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0013_fleet"
down_revision = "0012_environments"
branch_labels = None
depends_on = None

_NODE_COLUMNS: tuple[tuple[str, sa.types.TypeEngine[Any]], ...] = (
    ("owner", sa.String(64)),
    ("labels", sa.JSON(none_as_null=True)),
    ("gpu_model", sa.String(64)),
    ("drain_reason", sa.Text()),
    ("gpu_health", sa.JSON(none_as_null=True)),
)
_JOB_COLUMNS: tuple[tuple[str, sa.types.TypeEngine[Any]], ...] = (
    ("gpu_memory_mb", sa.Integer()),
    ("constraints", sa.JSON(none_as_null=True)),
)


def upgrade() -> None:
    for name, kind in _NODE_COLUMNS:
        op.add_column("nodes", sa.Column(name, kind))
    for name, kind in _JOB_COLUMNS:
        op.add_column("jobs", sa.Column(name, kind))
    op.add_column("jobs", sa.Column("torchrun", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for name in ("torchrun", *(n for n, _ in reversed(_JOB_COLUMNS))):
            batch.drop_column(name)
    with op.batch_alter_table("nodes") as batch:
        for name, _ in reversed(_NODE_COLUMNS):
            batch.drop_column(name)
