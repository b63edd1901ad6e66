"""Environments and datasets: `environments` (a container image and the runtime it needs, a Python environment
path, and/or a setup line, each with an owner, a lab or none for global, a description and a use count),
`datasets` (a name for a read-only path on the nodes, global or a lab's); each job's `environment` (its name),
`environment_spec` (what it was when the job was submitted) and `datasets` (name -> path).

Revision ID: 0012_environments
Revises: 0011_identity
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_environments"
down_revision = "0011_identity"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "environments",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("owner_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("lab_id", sa.Integer(), sa.ForeignKey("labs.id", ondelete="CASCADE")),
        sa.Column("image", sa.String(512)),
        sa.Column("runtime", sa.String(16)),
        sa.Column("python", sa.Text()),
        sa.Column("setup", sa.Text()),
        sa.Column("description", sa.Text(), nullable=False, server_default=""),
        sa.Column("uses", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("created", sa.Float(), nullable=False),
    )
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("owner_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("lab_id", sa.Integer(), sa.ForeignKey("labs.id", ondelete="CASCADE")),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False, server_default=""),
        sa.Column("uses", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("created", sa.Float(), nullable=False),
    )
    op.add_column("jobs", sa.Column("environment", sa.String(64)))
    op.add_column("jobs", sa.Column("environment_spec", sa.JSON(none_as_null=True)))
    op.add_column("jobs", sa.Column("datasets", sa.JSON(none_as_null=True)))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for name in ("datasets", "environment_spec", "environment"):
            batch.drop_column(name)
    op.drop_table("datasets")
    op.drop_table("environments")
