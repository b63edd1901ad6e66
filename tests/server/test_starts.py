"""A tick applies all its starts together; a GPU taken between its read and its write refuses only its own job; a job
starts no earlier than the run whose GPUs it was given ended."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import select

from nanum.core import Decisions
from nanum.protocol import JobStatus
from nanum.server import snapshot
from nanum.server.context import ServerContext
from nanum.store import AllocationRow, EventRow, JobRow, NodeRow
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import job, submit, tick
from tests.server.fakeagent import FakeAgent


def test_a_tick_starts_every_decided_job_with_an_event_each(client: AsgiClient, agent: FakeAgent,
                                                          ctx: ServerContext) -> None:
    ids = [submit(client, gpus=1)["id"] for _ in range(3)]
    tick(client)
    agent.beat()
    assert sorted(agent.held_gpus().values()) == [[0], [1], [2]]
    assert [job(client, i)["state"] for i in ids] == ["running"] * 3
    with ctx.db.read() as s:
        started = s.scalars(select(EventRow.job_id).where(EventRow.kind == "started")).all()
    assert sorted(started) == sorted(ids)


def test_a_gpu_taken_after_the_read_keeps_only_its_job_pending(client: AsgiClient, agent: FakeAgent,
                                                              ctx: ServerContext) -> None:
    first, second = submit(client, gpus=1)["id"], submit(client, gpus=1)["id"]
    holder = submit(client, gpus=1, command=["sleep", "1"])["id"]
    scheduler = client.app.state.scheduler
    decide = scheduler.core.cycle

    def race(snapshot: object) -> Decisions:
        decisions = decide(snapshot)  # type: ignore[arg-type]
        taken = next(st for st in decisions.starts if st.job_id == first).placements[0].gpus[0]
        with ctx.db.write() as s:  # another server, say, hands that GPU out meanwhile
            node = s.scalars(select(NodeRow.id).where(NodeRow.name == "gpu-01")).one()
            s.add(AllocationRow(job_id=holder, node_id=node, gpu_index=taken))
        return Decisions(starts=tuple(st for st in decisions.starts if st.job_id != holder),
                         preemptions=decisions.preemptions, pending=decisions.pending)

    scheduler.core.cycle = race
    tick(client)
    assert job(client, first)["state"] == "pending"
    assert job(client, second)["state"] == "running"
    with ctx.db.read() as s:
        assert s.scalars(select(JobRow.state).where(JobRow.id == first)).one() == "pending"
        held = s.scalars(select(AllocationRow.job_id).order_by(AllocationRow.job_id)).all()
    assert held == sorted([second, holder])


def test_a_job_given_the_gpus_of_a_run_that_just_ended_starts_after_that_run_ended(
        client: AsgiClient, agent: FakeAgent, ctx: ServerContext, monkeypatch: pytest.MonkeyPatch) -> None:
    """The end a heartbeat writes is its own time, taken before it commits; a tick that reads that end must start
    the next job on those GPUs later, or a lab's runs overlap and it seems over its GPU limit."""
    first = submit(client, gpus=4)["id"]
    tick(client)
    agent.beat()
    second = submit(client, gpus=4)["id"]
    learn = snapshot.learn

    def report_the_exit_first(*args: Any) -> float:  # the exit commits between the tick's start and its read
        time.sleep(0.05)
        agent.running.pop(first)
        agent.exited[first] = JobStatus(job_id=first, state="exited", exit_code=0)
        agent.beat()
        monkeypatch.setattr(snapshot, "learn", learn)
        return learn(*args)

    monkeypatch.setattr(snapshot, "learn", report_the_exit_first)
    tick(client)
    ended = job(client, first)
    started = job(client, second)
    assert (ended["state"], started["state"]) == ("completed", "running")
    end = ended["segments"][-1]["end"]  # type: ignore[index]
    start = started["segments"][0]["start"]  # type: ignore[index]
    assert datetime.fromisoformat(str(start)) >= datetime.fromisoformat(str(end)), (start, end)
