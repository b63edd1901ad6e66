"""Single sign-on identities (filled in by the OIDC work).

Revision ID: 0014_oidc
Revises: 0013_fleet
Create Date: 2026-12-01
"""

from __future__ import annotations

revision = "0014_oidc"
down_revision = "0013_fleet"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
