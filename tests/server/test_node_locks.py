"""On PostgreSQL, writing a node's readings (or anything whose foreign key names the node) takes a key-share lock on
the node's row until it commits. A heartbeat, a scheduling tick and the write of when nodes were last heard lock
the node's row to write it, FOR NO KEY UPDATE: none waits for such a write, nor such a write for them. (FOR
UPDATE waited, and at 1,000 nodes a tick so deadlocked with a node's readings.)"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import event, select, text

from nanum.server.context import ServerContext
from nanum.server.services import accounts
from nanum.store import NodeRow
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import submit, tick
from tests.server.fakeagent import FakeAgent
from tests.server.monitoredagent import MonitoredAgent

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



@pytest.mark.parametrize("database", ["postgres"], indirect=True)
def test_a_write_of_when_nodes_were_heard_holds_up_no_write_of_their_readings(
    client: AsgiClient, ctx: ServerContext
) -> None:
    """The heard times are written about once a second, for every node heard meanwhile; the readings too, in a
    transaction of their own. Neither waits for the other."""
    node = MonitoredAgent(client, "gpu-02", accounts.add_node(ctx, "gpu-02"), gpus=2)
    node.beat()
    locked, release = threading.Event(), threading.Event()

    def pause(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if "SKIP LOCKED" in statement and threading.current_thread().name == "flush":
            locked.set()  # the nodes' rows are locked: the flush stops here until the readings are written
            release.wait(10)

    event.listen(ctx.db.engine, "after_cursor_execute", pause)
    flush = threading.Thread(target=lambda: ctx.last_seen.flush(ctx.db), name="flush", daemon=True)
    try:
        with ctx.db.read() as s:
            node_id = s.scalar(select(NodeRow.id).where(NodeRow.name == "gpu-02"))
        ctx.last_seen.heard(node_id, time.time())
        flush.start()
        assert locked.wait(10)
        node.read(util=40.0)
        FakeAgent.beat(node)
        assert within(5.0, client.app.state.monitoring.flush), "the readings waited for the write of the heard times"
    finally:
        release.set()
        flush.join(10)
        event.remove(ctx.db.engine, "after_cursor_execute", pause)
