"""Notebooks and interactive sessions (filled in by the notebook work).

Revision ID: 0015_sessions
Revises: 0014_oidc
Create Date: 2026-12-01
"""

from __future__ import annotations

revision = "0015_sessions"
down_revision = "0014_oidc"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
