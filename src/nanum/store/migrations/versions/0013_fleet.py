"""Node lifecycle, labels and owners (filled in by the fleet work).

Revision ID: 0013_fleet
Revises: 0012_environments
Create Date: 2026-12-01
"""

from __future__ import annotations

revision = "0013_fleet"
down_revision = "0012_environments"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
