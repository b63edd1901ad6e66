"""Jobs that need no GPU (`gpus=0`) against the real app: placed on a node with room for their CPUs and memory,
started, finished and cancelled like any job, never holding a GPU; and a start that cannot be applied leaves no
half-written job behind."""

from __future__ import annotations

import time

from sqlalchemy import select

from nanum.core import schedule
from nanum.server.context import ServerContext
from nanum.store import AllocationRow, EventRow
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ALICE, BOB, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent


def gpu_holders(client: AsgiClient) -> set[object]:
    nodes = client.get("/api/v1/nodes", headers=auth(BOB)).json()
    return {g["job_id"] for n in nodes for g in n["gpus"]}


def events(ctx: ServerContext, job_id: object) -> list[str]:
    with ctx.db.read() as s:
        return list(s.scalars(select(EventRow.kind).where(EventRow.job_id == job_id).order_by(EventRow.id)))


def test_a_job_needing_no_gpu_runs_beside_gpu_jobs_and_completes(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    cpu = submit(client, gpus=0, cpus=4)
    full = submit(client, BOB, gpus=4)
    tick(client)
    running = job(client, cpu["id"])
    assert running["state"] == "running" and running["allocation"] == [{"node": "gpu-01", "gpus": []}]
    assert job(client, full["id"])["state"] == "running"  # the CPU-only job took none of the 4 GPUs
    assert gpu_holders(client) == {full["id"]}
    launches = {d.job_id: d for d in agent.beat().desired}
    assert launches[cpu["id"]].gpus == []
    agent.exit(cpu["id"], code=0)
    assert cpu["id"] in agent.beat().ack
    done = job(client, cpu["id"])
    assert done["state"] == "completed" and done["exit_code"] == 0
    assert events(ctx, cpu["id"]) == ["submitted", "started", "completed"]


def test_a_job_needing_no_gpu_can_be_cancelled_before_and_after_its_agent_starts_it(
    client: AsgiClient, agent: FakeAgent
) -> None:
    started, unheard = submit(client, gpus=0), submit(client, gpus=0)
    tick(client)
    agent.beat()
    agent.running.pop(unheard["id"])  # the agent never started this one
    for j in (started, unheard):
        assert client.post(f"/api/v1/jobs/{j['id']}/cancel", headers=auth(ALICE)).status_code == 200
    assert agent.beat().desired == []  # told to stop it: it exits with SIGTERM
    agent.beat()
    assert job(client, started["id"])["state"] == "cancelled"
    assert job(client, unheard["id"])["state"] == "cancelled"


def test_jobs_needing_no_gpu_share_a_node_only_as_far_as_its_cpus_go(client: AsgiClient, agent: FakeAgent) -> None:
    jobs = [submit(client, gpus=0, cpus=12) for _ in range(3)]  # the node has 32 CPUs
    tick(client)
    states = [job(client, j["id"])["state"] for j in jobs]
    assert states == ["running", "running", "pending"]
    agent.beat()
    agent.exit(jobs[0]["id"])
    agent.beat()
    tick(client)
    assert job(client, jobs[2]["id"])["state"] == "running"


def test_a_job_needing_no_gpu_is_kept_when_its_silent_node_returns(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    j = submit(client, gpus=0)
    tick(client)
    agent.beat()
    client.app.state.scheduler.tick(now=time.time() + ctx.settings.node_timeout_s + 5)
    assert job(client, j["id"])["state"] == "pending"
    assert [d.job_id for d in agent.beat().desired] == [j["id"]]
    assert job(client, j["id"])["state"] == "running"
    assert events(ctx, j["id"])[-3:] == ["lost", "requeued", "recovered"]


def test_a_start_whose_gpu_was_taken_meanwhile_leaves_the_job_pending_and_untouched(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    """A tick decides on a snapshot; when it applies, the GPU it chose is held already (as if another server had
    handed it out): the job's row, history and GPUs must show nothing of that start, and the tick's other starts
    still happen."""
    other = submit(client, gpus=1)
    tick(client)
    late, fine = submit(client, gpus=1), submit(client, gpus=1)
    sched, now = client.app.state.scheduler, time.time()
    plan, now = sched._read(now)
    decisions = schedule(plan.snapshot, ctx.policy, sched.predictor)
    [start] = [st for st in decisions.starts if st.job_id == late["id"]]
    gpu = start.placements[0].gpus[0]
    with ctx.db.write() as s:
        s.execute(
            AllocationRow.__table__.insert(),
            {"job_id": other["id"], "node_id": plan.node_ids["gpu-01"], "gpu_index": gpu},
        )
    sched._apply(plan, decisions, now)
    shown = job(client, late["id"])
    assert shown["state"] == "pending" and shown["runs"] == 0 and shown["start_time"] is None
    assert events(ctx, late["id"]) == ["submitted"]
    assert job(client, fine["id"])["state"] == "running"
    with ctx.db.read() as s:
        assert s.scalars(select(AllocationRow.id).where(AllocationRow.job_id == late["id"])).all() == []
