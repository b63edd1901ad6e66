"""On PostgreSQL a node's row is rewritten in its own page when its `last_seen` is (migration 0024): a fleet's
server writes every node's time about once a second, and a scheduling tick reads every node."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from nanum.store import Database

pytestmark = pytest.mark.postgres


def _pages(db: Database) -> dict[str, int]:
    """Each node's page in the table (from its row's physical address)."""
    with db.read() as s:
        return {name: int(str(ctid).strip("()").split(",")[0])
                for name, ctid in s.execute(text("SELECT name, ctid FROM nodes"))}


@pytest.mark.parametrize("database", ["postgres"], indirect=True)  # SQLite has no such setting
def test_a_nodes_time_is_written_in_place(database: Database) -> None:
    inventory = '{"gpus": [' + ", ".join(f'{{"index": {i}, "model": "NVIDIA H100 80GB HBM3", "memory_mb": 81559}}'
                                         for i in range(8)) + "]}"
    with database.write() as s:
        for i in range(40):
            s.execute(text("INSERT INTO nodes (name, state, desired_version, created, inventory) "
                           "VALUES (:name, 'up', 0, 0, CAST(:inventory AS JSON))"),
                      {"name": f"gpu-{i:02d}", "inventory": inventory})
    before = _pages(database)
    assert len(set(before.values())) > 2  # the rows fill several pages
    for _ in range(3):  # three flushes of every node's time
        with database.write() as s:
            s.execute(text("UPDATE nodes SET last_seen = :now"), {"now": time.time()})
    assert _pages(database) == before, "a node's row moved to another page when its time was written"
