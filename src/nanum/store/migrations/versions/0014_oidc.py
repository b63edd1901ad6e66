"""Single sign-on identities: a user made at an OpenID Connect login keeps the provider (`oidc_issuer`) and who
they are there (`oidc_subject`, the ID token's `sub`); later logins find them by these two, unique together.

Revision ID: 0014_oidc
Revises: 0013_fleet
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_oidc"
down_revision = "0013_fleet"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("users", sa.Column("oidc_issuer", sa.String(255)))
    op.add_column("users", sa.Column("oidc_subject", sa.String(255)))
    op.create_index("uq_users_oidc", "users", ["oidc_issuer", "oidc_subject"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_users_oidc", table_name="users")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("oidc_subject")
        batch.drop_column("oidc_issuer")
