"""On PostgreSQL, node rows are stored half a page apart: every node's `last_seen` is written about once a second
(`nanum.server.lastseen`), and with full pages most of those updates wrote a new row version on another page and
in every index of the table. With room left in the page the update stays in it (a heap-only tuple), and the
dead versions are pruned there: a scheduling tick, which reads every node, reads a table that stays small.
SQLite has no such setting.

Revision ID: 0024_nodes_fillfactor
Revises: 0023_job_paths_index
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

revision = "0024_nodes_fillfactor"
down_revision = "0023_job_paths_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE nodes SET (fillfactor = 50)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE nodes RESET (fillfactor)")
