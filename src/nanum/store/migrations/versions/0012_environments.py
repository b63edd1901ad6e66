"""Environments and datasets (filled in by the environments work).

Revision ID: 0012_environments
Revises: 0011_identity
Create Date: 2026-12-01
"""

from __future__ import annotations

revision = "0012_environments"
down_revision = "0011_identity"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
