"""A tick applies all its starts together; a GPU taken between its read and its write refuses only its own job."""

from __future__ import annotations

from sqlalchemy import select

from nanum.core import Decisions
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
