"""Identity: a role per membership (`member` or `manager` of that lab); a user's `email`, `source` (None: made
here; `ldap`: made at a first directory login), directory `uid_number`, and `disabled` (refused at login and on
every request); `tokens`: more API tokens per user (stored as SHA-256), each with a name and an optional expiry.

Revision ID: 0011_identity
Revises: 0010_job_control
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_identity"
down_revision = "0010_job_control"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("memberships", sa.Column("role", sa.String(16), nullable=False, server_default="member"))
    op.add_column("users", sa.Column("email", sa.String(255)))
    op.add_column("users", sa.Column("source", sa.String(16)))
    op.add_column("users", sa.Column("uid_number", sa.Integer()))
    op.add_column("users", sa.Column("disabled", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("created", sa.Float(), nullable=False),
        sa.Column("expires", sa.Float()),
        sa.Column("last_used", sa.Float()),
    )
    op.create_index("ix_tokens_user", "tokens", ["user_id"])


def downgrade() -> None:
    op.drop_index("ix_tokens_user", table_name="tokens")
    op.drop_table("tokens")
    with op.batch_alter_table("users") as batch:
        for name in ("disabled", "uid_number", "source", "email"):
            batch.drop_column(name)
    with op.batch_alter_table("memberships") as batch:
        batch.drop_column("role")
