"""Notebooks and interactive shells: `jobs.session_secret`, the per-job secret the server proxies a notebook
with (its Jupyter token) and a shell's relay authenticates with; `jobs.session_address`, `HOST:PORT` where the
job's JupyterLab listens, as its agent reported it (None until then, and for other kinds).

Revision ID: 0015_sessions
Revises: 0014_oidc
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_sessions"
down_revision = "0014_oidc"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("session_secret", sa.String(64)))
    op.add_column("jobs", sa.Column("session_address", sa.String(255)))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("session_address")
        batch.drop_column("session_secret")
