"""A heartbeat that reports nothing new is answered without a write of its own: its time is written with others'
a moment later. What users see stays true: the node's last seen time, a node that keeps reporting stays up, and a
node that falls silent is given up on time by the scheduling server, also when another server heard it."""

from __future__ import annotations

import threading
import time
from datetime import datetime

import pytest
from sqlalchemy import select

from nanum.server.app import create_app
from nanum.server.context import ServerContext
from nanum.server.lastseen import OVERDUE_S, PEER_SLACK_S
from nanum.server.services import accounts
from nanum.store import NodeRow
from tests.server.asgiclient import AsgiClient, serve
from tests.server.conftest import ADMIN, auth, job, submit, tick, writing_as_served
from tests.server.fakeagent import FakeAgent


def _last_seen(client: AsgiClient, name: str) -> float | None:
    """The node's last seen time as `nanum nodes` shows it (ISO 8601, milliseconds), in epoch seconds."""
    nodes = client.get("/api/v1/nodes", headers=auth(ADMIN)).json()
    shown = next(n["last_seen"] for n in nodes if n["name"] == name)
    return None if shown is None else datetime.fromisoformat(shown.replace("Z", "+00:00")).timestamp()


def _stored(ctx: ServerContext, name: str) -> float | None:
    """The node's last seen time as the database has it."""
    with ctx.db.read() as s:
        return s.scalar(select(NodeRow.last_seen).where(NodeRow.name == name))


def _shows(client: AsgiClient, name: str, at: float) -> bool:
    """Whether the node's shown last seen time is `at` (to the millisecond it is shown with)."""
    shown = _last_seen(client, name)
    return shown is not None and abs(shown - at) < 0.002


def _running_through(ctx: ServerContext, client: AsgiClient, other: ServerContext,
                     second: AsgiClient) -> tuple[FakeAgent, dict[str, object]]:
    """Node gpu-01, heard by the second server (`other`, serving `second`), running a job the first one started."""
    agent = FakeAgent(second, "gpu-01", accounts.add_node(ctx, "gpu-01"), gpus=4)
    agent.beat()
    j = submit(client, gpus=1)
    tick(client)
    # The first server's wake-up of the node, as the bus delivers it between servers on PostgreSQL (on SQLite,
    # which has one server, nothing carries it): the second remembers its answer to the last heartbeat.
    other.signals.wake_local(["gpu-01"])
    agent.beat()  # starts the job
    return agent, j


def test_a_node_reporting_the_same_running_job_stays_up_and_shows_when_it_was_heard(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    j = submit(client, gpus=1)
    tick(client)
    agent.beat()  # starts the job
    assert [d.job_id for d in agent.beat().desired] == [j["id"]]  # nothing new: the job runs on
    later = time.time() + 600
    ctx.clock = lambda: later  # ten minutes on, the node still reports just that
    assert [d.job_id for d in agent.beat().desired] == [j["id"]]
    wait = ctx.settings.requeue_after_s(ctx.settings.grace_s)
    client.app.state.scheduler.tick(now=later + wait - 1)
    assert job(client, j["id"])["state"] == "running"
    assert _shows(client, "gpu-01", later)
    client.app.state.scheduler.tick(now=later + wait + 1)  # then it falls silent
    assert job(client, j["id"])["state"] == "pending"


def test_a_node_heard_by_another_server_shows_there_and_is_given_up_by_the_scheduling_one(
    client: AsgiClient, ctx: ServerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = ServerContext.create(ctx.settings, ctx.db)  # a second server on the same database, not scheduling
    writing_as_served(monkeypatch)
    with serve(create_app(other, run_scheduler=False)) as second:
        agent, j = _running_through(ctx, client, other, second)
        agent.beat()  # reports it running
        later = time.time() + 600
        other.clock = lambda: later
        assert [d.job_id for d in agent.beat().desired] == [j["id"]]  # nothing new, heard by the second server
        deadline = time.monotonic() + 30
        while not _shows(client, "gpu-01", later):  # written within about a second
            assert time.monotonic() < deadline, "the scheduling server never saw the node's last heartbeat"
            time.sleep(0.1)
        wait = ctx.settings.requeue_after_s(ctx.settings.grace_s)
        client.app.state.scheduler.tick(now=later + wait - 1)
        assert job(client, j["id"])["state"] == "running"
        client.app.state.scheduler.tick(now=later + wait + PEER_SLACK_S + 1)
        assert job(client, j["id"])["state"] == "pending"


def test_a_server_that_stops_writes_when_it_last_heard_from_its_nodes(ctx: ServerContext) -> None:
    with serve(create_app(ctx, run_scheduler=False)) as first:
        agent = FakeAgent(first, "gpu-01", accounts.add_node(ctx, "gpu-01"), gpus=4)
        agent.beat()
        later = time.time() + 600
        ctx.clock = lambda: later
        agent.beat()  # nothing new
    again = ServerContext.create(ctx.settings, ctx.db)  # the server started again
    with serve(create_app(again, run_scheduler=False)) as second:
        assert _shows(second, "gpu-01", later)


def test_a_tick_starts_a_job_on_a_node_whose_latest_heartbeat_is_not_written_yet(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    """A scheduling tick writes no heard times (the periodic flush does): it counts a node as up by the later of its
    stored time and the one this server noted, so a node whose stored time is past the node timeout but which was
    just heard gets the job at once. And a tick does not wait for a flush under way."""
    agent.beat()
    later = time.time() + 600  # ten minutes on: the stored time is far past the node timeout
    ctx.clock = lambda: later
    agent.beat()  # nothing new: its time waits for a flush
    j = submit(client, gpus=1)
    done = threading.Event()
    with ctx.last_seen._flush_lock:  # a flush is under way
        threading.Thread(target=lambda: (client.app.state.scheduler.tick(now=later + 1), done.set()),
                         daemon=True).start()
        assert done.wait(10), "the tick waited for the flush"
    assert job(client, j["id"])["state"] == "running"
    assert [d.job_id for d in agent.beat().desired] == [j["id"]]
    assert ctx.last_seen.flush(ctx.db) == 1  # the time noted was kept for the flush


def test_a_tick_writes_the_noted_times_only_when_the_writer_is_late(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    """On a busy server the periodic writer's transaction waits while ticks go first; once a noted time has waited
    `OVERDUE_S`, the tick writes them itself (the nodes' last seen times must not fall `STALE_S` behind, or every
    heartbeat starts writing its own)."""
    agent.beat()
    later = time.time() + 600
    ctx.clock = lambda: later
    agent.beat()  # nothing new: its time waits for a flush
    tick(client)
    assert _stored(ctx, "gpu-01") != later  # the writer is not late: the tick wrote nothing
    ctx.last_seen._oldest = time.monotonic() - OVERDUE_S - 1  # noted that long ago
    tick(client)
    assert _stored(ctx, "gpu-01") == later


def test_a_node_reporting_a_job_s_end_shows_when_it_was_heard_on_every_server(
    client: AsgiClient, ctx: ServerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A heartbeat that reports ends writes the jobs at once, and its time with the others' a moment later: the
    node stays up and shows that time, also on a server that did not hear it."""
    other = ServerContext.create(ctx.settings, ctx.db)  # a second server on the same database, not scheduling
    writing_as_served(monkeypatch)
    with serve(create_app(other, run_scheduler=False)) as second:
        agent, j = _running_through(ctx, client, other, second)
        later = time.time() + 600
        other.clock = lambda: later
        agent.exit(int(j["id"]))
        agent.beat()  # reports its end, ten minutes on
        assert job(client, j["id"])["state"] == "completed"  # at once
        deadline = time.monotonic() + 30
        while not _shows(client, "gpu-01", later):  # written within about a second
            assert time.monotonic() < deadline, "the node's time of its last heartbeat was never written"
            time.sleep(0.1)
        nodes = client.get("/api/v1/nodes", headers=auth(ADMIN)).json()
        assert [n["state"] for n in nodes] == ["up"]


def test_a_node_that_comes_up_is_up_at_once_on_every_server(client: AsgiClient, ctx: ServerContext) -> None:
    """Its first heartbeat writes its time with its state: the other servers see it up without waiting."""
    other = ServerContext.create(ctx.settings, ctx.db)
    with serve(create_app(other, run_scheduler=False)) as second:
        agent = FakeAgent(second, "gpu-01", accounts.add_node(ctx, "gpu-01"), gpus=4)
        later = time.time() + 600  # the first server has no time of its own for the node
        other.clock = lambda: later
        agent.beat()
        assert _stored(ctx, "gpu-01") == later
        ctx.clock = lambda: later
        nodes = client.get("/api/v1/nodes", headers=auth(ADMIN)).json()
        assert [n["state"] for n in nodes] == ["up"]
