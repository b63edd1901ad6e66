"""On PostgreSQL, writing a node's readings (or anything whose foreign key names the node) takes a key-share lock on
the node's row until it commits. A heartbeat and a scheduling tick lock the node's row to write it, FOR NO KEY
UPDATE: neither waits for such a write. (FOR UPDATE waited, and at 1,000 nodes a tick so deadlocked with a node's
readings.)"""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

from nanum.server.context import ServerContext
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import submit, tick
from tests.server.fakeagent import FakeAgent

pytestmark = pytest.mark.postgres


def within(seconds: float, call: object) -> bool:
    """Whether `call()` returned within `seconds` (it is left to finish in the background otherwise)."""
    done = threading.Event()

    def run() -> None:
        call()  # type: ignore[operator]
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done.wait(seconds)


@pytest.mark.parametrize("database", ["postgres"], indirect=True)  # SQLite locks the whole database instead
def test_an_uncommitted_write_of_a_nodes_readings_holds_up_neither_its_heartbeat_nor_a_tick(
    client: AsgiClient, agent: FakeAgent, ctx: ServerContext
) -> None:
    with ctx.db.engine.connect() as other:
        other.begin()
        # as a reading's raw row does (its foreign key takes a key-share lock on the node's row)
        other.execute(text("INSERT INTO gpu_samples (node_id, gpu_index, res, at, job_id, util, util_max, memory_mb,"
                           " memory_max, n) SELECT id, 0, 0, 1.0, 0, 0, 0, 0, 0, 1 FROM nodes WHERE name = 'gpu-01'"))
        job = submit(client, gpus=1)["id"]
        try:
            assert within(5.0, lambda: tick(client)), "the tick waited for the readings' transaction"
            assert within(5.0, agent.beat), "the heartbeat waited for the readings' transaction"
            assert job in agent.running
            agent.exit(job)
            assert within(5.0, agent.beat)
        finally:
            other.rollback()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and agent.exited:
        agent.beat()
    assert not agent.exited
