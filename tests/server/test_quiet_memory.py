"""A quiet heartbeat that reports just what the node's last one reported is answered from memory, without reading
the store, and never with an answer that a change made since has outdated: a job started or cancelled, a GPU put
back in service, the node marked down, on this server or on another one sharing the database. The memory outlasts
a long-polling node's held heartbeat, not a lease, and is not used while this server may miss another's wakes."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from types import CodeType

import pytest
from sqlalchemy import select

from nanum.protocol import GpuProblem
from nanum.server.app import create_app
from nanum.server.context import ServerContext
from nanum.server.lastseen import LastSeen
from nanum.server.services import accounts
from nanum.server.services import agent as agent_service
from nanum.store import NodeRow
from nanum.store.db import Database
from tests.server.asgiclient import AsgiClient, serve
from tests.server.conftest import ADMIN, ALICE, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent
from tests.server.test_fleet import _beat_with, _node
from tests.server.test_two_servers import pair  # noqa: F401  (a fixture)


@contextmanager
def counting_calls(monkeypatch: pytest.MonkeyPatch, owner: object, name: str,
                   ignore: CodeType | None = None) -> Iterator[list[int]]:
    """How many times `owner.name` (a function of a module, or a method of a class) is called meanwhile, other
    than by the function whose code is `ignore`."""
    calls = [0]
    real = getattr(owner, name)

    def counted(*args: object, **kwargs: object) -> object:
        if ignore is None or sys._getframe(1).f_code is not ignore:
            calls[0] += 1
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(owner, name, counted)
        yield calls


def counting_reads(ctx: ServerContext, monkeypatch: pytest.MonkeyPatch) -> AbstractContextManager[list[int]]:
    """How many read transactions the server opens meanwhile."""
    return counting_calls(monkeypatch, Database, "read")


def counting_writes(monkeypatch: pytest.MonkeyPatch) -> AbstractContextManager[list[int]]:
    """How many write transactions the server opens meanwhile for requests: not the batched writes of when nodes
    were last heard from, which run on a timer of their own (`LastSeen`) and may land in any window."""
    return counting_calls(monkeypatch, Database, "write", ignore=LastSeen._flush.__code__)


def _desired(agent: FakeAgent) -> list[int]:
    return [d.job_id for d in agent.beat().desired]


def test_a_heartbeat_that_repeats_a_quiet_one_reads_nothing_and_gets_the_same_answer(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = submit(client, gpus=1)["id"]
    tick(client)
    agent.beat()  # starts it
    agent.beat()  # reports it running, with its pid: quiet, answered from the store
    assert _desired(agent) == [j]  # nothing new: answered from memory
    with counting_reads(ctx, monkeypatch) as reads:
        assert _desired(agent) == [j]
        assert _desired(agent) == [j]
    assert reads == [0]
    assert job(client, j)["state"] == "running"


def test_the_heartbeat_that_first_reports_a_job_its_agent_started_writes_nothing(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = submit(client, gpus=1)["id"]
    tick(client)
    assert _desired(agent) == [j]  # the agent starts it
    with counting_writes(monkeypatch) as writes:
        assert _desired(agent) == [j]  # reports it running, with its pid: the job's row has nothing to change
        assert writes == [0]
    agent.exit(j)
    with counting_writes(monkeypatch) as writes:
        assert _desired(agent) == []  # its end is written
        assert writes == [1]
    assert job(client, j)["state"] == "completed"


def test_a_written_heartbeat_that_rolled_back_leaves_no_list_in_memory(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its desired list was never committed: a node's desired version may be reached again by another change, and
    a list remembered for it would then be answered from memory, out of date."""
    j = submit(client, gpus=1)["id"]
    tick(client)
    agent.beat()  # starts it
    agent.beat()  # reports it running
    with ctx.db.read() as s:
        node_id = s.scalar(select(NodeRow.id).where(NodeRow.name == agent.name))
    remembered = ctx.caches.desired.get(node_id)
    assert remembered is not None and [d.job_id for d in remembered[2]] == [j]
    agent.exit(j)

    def failing(*args: object, **kwargs: object) -> object:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m, pytest.raises(OSError):  # the server answers 500
        m.setattr(agent_service.joblogs, "write_logs", failing)
        client.post("/api/v1/agent/heartbeat", content=agent.heartbeat().model_dump_json(),
                    headers={**auth(agent.token), "Content-Type": "application/json"})
    assert job(client, j)["state"] == "running"  # its end was rolled back
    assert ctx.caches.desired.get(node_id) == remembered
    assert _desired(agent) == [] and job(client, j)["state"] == "completed"  # the agent's next heartbeat


def test_the_heartbeat_after_one_that_wrote_reads_nothing_and_an_end_it_reports_is_written(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    j, k = submit(client, gpus=1)["id"], submit(client, gpus=1)["id"]
    tick(client)
    agent.beat()  # starts both
    agent.beat()  # reports them running, with their pids: quiet, answered from the store
    with counting_reads(ctx, monkeypatch) as reads:
        assert sorted(_desired(agent)) == [j, k]  # the same report: answered from memory
        assert reads == [0]
    agent.exit(j)
    agent.beat()  # its end: written and acknowledged
    assert job(client, j)["state"] == "completed"
    with counting_reads(ctx, monkeypatch) as reads:
        assert _desired(agent) == [k]  # the same report less the end acknowledged
        assert reads == [0]
    assert agent.running.keys() == {k}


def test_a_long_polling_nodes_heartbeat_after_its_hold_is_answered_from_memory_for_a_lease(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = submit(client, gpus=1)["id"]
    tick(client)
    agent.beat()
    agent.beat()
    assert _desired(agent) == [j]  # quiet, remembered
    real = agent_service.monotonic
    lease = ctx.settings.lease_s
    with counting_reads(ctx, monkeypatch) as reads:
        # the next heartbeat comes once the held one ends: up to a third of a lease later
        monkeypatch.setattr(agent_service, "monotonic", lambda: real() + lease / 3 + 1)
        assert _desired(agent) == [j]
        assert reads == [0]
        monkeypatch.setattr(agent_service, "monotonic", lambda: real() + lease + 1)
        assert _desired(agent) == [j]  # a lease on: read again, whatever the wakes said
        assert reads == [1]


def test_a_change_since_the_last_quiet_heartbeat_is_in_the_next_answer(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    assert _desired(agent) == []
    assert _desired(agent) == []  # quiet, remembered
    j = submit(client, gpus=1)["id"]
    tick(client)
    assert _desired(agent) == [j]  # started since
    assert _desired(agent) == [j]
    assert client.post(f"/api/v1/jobs/{j}/cancel", headers=auth(ALICE)).status_code == 200
    assert _desired(agent) == []  # cancelled since: the agent stops it
    agent.beat()  # and reports it ended
    assert job(client, j)["state"] == "cancelled"


def test_a_gpu_put_back_in_service_while_its_agent_still_reports_a_problem_goes_out_again(
    client: AsgiClient, agent: FakeAgent
) -> None:
    problem = [GpuProblem(index=1, problem="Xid 79 (fallen off the bus)")]
    _beat_with(agent, problem)
    _beat_with(agent, problem)  # nothing new: quiet, remembered
    assert client.post("/api/v1/nodes/gpu-01/resume", headers=auth(ADMIN)).status_code == 200
    assert _node(client, "gpu-01")["gpus"][1]["health"] is None
    _beat_with(agent, problem)  # the same report, but the store no longer has the problem
    assert _node(client, "gpu-01")["gpus"][1]["health"] == "Xid 79 (fallen off the bus)"


def test_a_node_marked_down_comes_up_with_its_next_heartbeat(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    agent.beat()
    agent.beat()  # quiet, remembered
    silent = time.time() + ctx.settings.requeue_after_s(0.0) + 60
    ctx.started -= 3600  # long since the server started: the sweep gives nodes up
    client.app.state.scheduler.tick(now=silent)
    assert _node(client, "gpu-01")["state"] == "down"
    agent.beat()  # the same report as before
    assert _node(client, "gpu-01")["state"] == "up"


@contextmanager
def two_servers(contexts: tuple[ServerContext, ServerContext]
                ) -> Iterator[tuple[AsgiClient, AsgiClient, FakeAgent]]:
    """Clients of servers a (it schedules when asked to tick) and b, and gpu-01's agent talking to b, which hears
    a's wake-ups."""
    ctx_a, ctx_b = contexts
    app_a, app_b = create_app(ctx_a, run_scheduler=False), create_app(ctx_b, run_scheduler=False)
    with serve(app_a) as client_a, serve(app_b) as client_b:
        assert ctx_b.signals.bus is not None and ctx_b.signals.bus.listening.wait(5)
        try:
            yield client_a, client_b, FakeAgent(client_b, "gpu-01", accounts.add_node(ctx_b, "gpu-01"))
        finally:
            app_a.state.scheduler.leadership.release()


def _started_by_a(client_a: AsgiClient, ctx_b: ServerContext) -> int:
    """Submit a 1-GPU job to a and start it there; return once b heard of it (through the database)."""
    before = ctx_b.signals.generation("gpu-01")
    j = int(submit(client_a, gpus=1)["id"])
    assert client_a.app.state.scheduler.tick() is not None  # a schedules, and starts the job on gpu-01
    deadline = time.monotonic() + 5
    while ctx_b.signals.generation("gpu-01") == before:
        assert time.monotonic() < deadline, "the other server's wake-up never arrived"
        time.sleep(0.01)
    return j


@pytest.mark.postgres
def test_a_job_started_by_the_other_server_reaches_a_node_whose_quiet_heartbeats_this_one_remembers(
    pair: tuple[ServerContext, ServerContext],  # noqa: F811
) -> None:
    with two_servers(pair) as (client_a, _, agent):
        assert _desired(agent) == [] and _desired(agent) == []  # quiet heartbeats to b, remembered there
        j = _started_by_a(client_a, pair[1])
        assert _desired(agent) == [j]


@pytest.mark.postgres
def test_a_server_that_is_not_hearing_the_others_wakes_answers_from_the_store(
    pair: tuple[ServerContext, ServerContext], monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    ctx_b = pair[1]
    with two_servers(pair) as (_, _, agent):
        assert _desired(agent) == [] and _desired(agent) == []  # remembered
        with counting_reads(ctx_b, monkeypatch) as reads:
            assert _desired(agent) == []
            assert reads == [0]
            assert ctx_b.signals.bus is not None
            ctx_b.signals.bus.listening.clear()  # its connection to the others' wakes is lost
            assert _desired(agent) == []
            assert reads == [1]


@pytest.mark.postgres
def test_a_job_that_ended_through_the_other_server_is_never_given_back_from_this_ones_memory(
    pair: tuple[ServerContext, ServerContext],  # noqa: F811
) -> None:
    with two_servers(pair) as (client_a, client_b, agent):
        agent.beat()
        j = _started_by_a(client_a, pair[1])
        assert _desired(agent) == [j]  # started through b
        assert _desired(agent) == [j]  # reported running to b, which remembers the answer
        agent.exit(j)
        agent.client = client_a  # b stops answering for a moment: the agent reports the end to a
        assert _desired(agent) == []
        assert job(client_a, j)["state"] == "completed"
        agent.client = client_b
        assert _desired(agent) == []  # b's memory is of a report with the job running
        assert agent.running == {}  # never started again


def test_the_heartbeat_that_reports_the_jobs_a_read_answer_handed_it_reads_nothing(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = submit(client, gpus=1)["id"]
    tick(client)
    agent.beat()  # starts it
    agent.beat()  # reports it running
    second = submit(client, gpus=1)["id"]
    tick(client)  # no heartbeat of the node is held: none is woken
    with counting_reads(ctx, monkeypatch) as reads, counting_writes(monkeypatch) as writes:
        assert _desired(agent) == [first, second]  # a quiet report, read: it hands the node the second job
        assert (reads, writes) == ([1], [0])
        assert _desired(agent) == [first, second]  # reports both running: from memory
        assert (reads, writes) == ([1], [0])
    assert job(client, second)["state"] == "running"


def test_the_heartbeat_that_reports_the_jobs_a_written_answer_handed_it_reads_nothing(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = submit(client, gpus=1)["id"]
    tick(client)
    agent.beat()
    agent.beat()
    second = submit(client, gpus=1)["id"]
    tick(client)
    agent.exit(first)
    with counting_reads(ctx, monkeypatch) as reads:
        assert _desired(agent) == [second]  # written: the first one's end, and the second job handed over
        assert _desired(agent) == [second]  # reports it running: from memory
    assert reads == [0]
    assert job(client, first)["state"] == "completed" and job(client, second)["state"] == "running"


def test_a_job_handed_over_that_its_agent_reports_otherwise_is_read_again(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memory is for the report the answer leads to; an agent that reports anything else (here: a checkpoint
    the new job found from an earlier run) is answered from the store, which records it."""
    j = submit(client, gpus=1)["id"]
    tick(client)
    assert _desired(agent) == [j]  # a read: it hands the job over
    agent.checkpoints[j] = 1234.5
    with counting_writes(monkeypatch) as writes:
        assert _desired(agent) == [j]
    assert writes == [1]
    assert job(client, j)["last_checkpoint"] is not None


def test_the_heartbeat_that_reports_an_end_keeps_the_other_jobs_from_memory(
    client: AsgiClient, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    j, k, m = (submit(client, gpus=1)["id"] for _ in range(3))
    tick(client)
    agent.beat()  # starts them
    agent.beat()
    agent.exit(j)
    with counting_calls(monkeypatch, agent_service, "desired_jobs") as built, \
            counting_calls(monkeypatch, agent_service.joblogs, "runs_in") as runs_read, \
            counting_calls(monkeypatch, agent_service, "_held_jobs") as held_read:
        reply = agent.beat()  # the end is written; the others' launches and runs are those it was last given
        assert built == [0] and runs_read == [0] and held_read == [1]
    assert sorted(d.job_id for d in reply.desired) == [k, m] and reply.ack == [j]
    assert job(client, j)["state"] == "completed" and agent.running.keys() == {k, m}


def test_an_end_reported_after_another_job_was_stopped_drops_both(
    client: AsgiClient, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    j, k, m = (submit(client, gpus=1)["id"] for _ in range(3))
    tick(client)
    agent.beat()
    agent.beat()
    r = client.post(f"/api/v1/jobs/{k}/cancel", headers=auth(ALICE))
    assert r.status_code == 200, r.text
    agent.exit(j)  # reported before the agent hears of the cancel
    with counting_calls(monkeypatch, agent_service, "desired_jobs") as built:
        reply = agent.beat()
        assert built == [1], "the stop changed the node's list: it is read again"
    assert [d.job_id for d in reply.desired] == [m]
    assert agent.running.keys() == {m}
