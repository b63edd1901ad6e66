"""Fencing on the server: a silent node's jobs are requeued only once its agent has surely stopped them (lease,
then the longest grace of its jobs, then a margin), and a job its agent stopped for want of a lease is requeued,
not failed. SQLite and PostgreSQL (the `database` fixture)."""

from __future__ import annotations

import time

from nanum.protocol import JobStatus
from nanum.server.context import ServerContext
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent


def test_the_reply_tells_the_agent_its_lease(client: AsgiClient, ctx: ServerContext, agent: FakeAgent) -> None:
    assert agent.beat().lease_s == ctx.settings.lease_s == 30.0


def test_a_silent_nodes_jobs_wait_for_the_lease_and_their_labs_grace(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    client.patch("/api/v1/labs/vision", json={"grace_s": 120}, headers=auth(ADMIN))
    j = submit(client, gpus=1)
    tick(client)
    agent.beat()
    heard = time.time()
    st = ctx.settings
    wait = st.lease_s + 120 + st.fence_margin_s
    client.app.state.scheduler.tick(now=heard + st.lease_s + st.grace_s + st.fence_margin_s + 1)
    assert job(client, j["id"])["state"] == "running"  # its agent may still be in the lab's 120 s of grace
    client.app.state.scheduler.tick(now=heard + wait - 1)
    assert job(client, j["id"])["state"] == "running"
    client.app.state.scheduler.tick(now=heard + wait + 1)
    requeued = job(client, j["id"])
    assert requeued["state"] == "pending" and requeued["runs"] == 1


def test_a_job_its_agent_fenced_is_requeued_not_failed(client: AsgiClient, agent: FakeAgent) -> None:
    j = submit(client, gpus=1)
    tick(client)
    agent.beat()
    agent.running.pop(j["id"])
    agent.exited[j["id"]] = JobStatus(
        job_id=j["id"], state="exited", exit_code=143, signal=15, fenced=True, ended_at=time.time(),
        reason="stopped on its node: the agent heard nothing from the server for longer than the lease",
    )
    reply = agent.beat()
    assert j["id"] in reply.ack
    requeued = job(client, j["id"])
    assert requeued["state"] == "pending" and requeued["runs"] == 1 and requeued["exit_code"] is None
    tick(client)
    again = job(client, j["id"])
    assert again["state"] == "running" and again["runs"] == 2


def test_a_fenced_report_after_the_job_moved_on_leaves_the_new_run_alone(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    from nanum.server.services import accounts

    j = submit(client, gpus=4)
    tick(client)
    agent.beat()
    other = FakeAgent(client, "gpu-02", accounts.add_node(ctx, "gpu-02"), gpus=4)
    st = ctx.settings
    client.app.state.scheduler.tick(now=time.time() + st.requeue_after_s(st.grace_s) + 1)
    other.beat()
    tick(client)
    assert job(client, j["id"])["allocation"] == [{"node": "gpu-02", "gpus": [0, 1, 2, 3]}]
    agent.running.pop(j["id"])
    agent.exited[j["id"]] = JobStatus(job_id=j["id"], state="exited", exit_code=143, signal=15, fenced=True)
    assert j["id"] in agent.beat().ack and agent.beat().desired == []
    again = job(client, j["id"])
    assert again["state"] == "running" and again["runs"] == 2
    assert [d.job_id for d in other.beat().desired] == [j["id"]]


def test_a_no_requeue_job_fails_when_its_node_is_lost(client: AsgiClient, ctx: ServerContext,
                                                      agent: FakeAgent) -> None:
    once = submit(client, gpus=1, requeue=False)
    again = submit(client, gpus=1)
    assert job(client, once["id"])["requeue"] is False and job(client, again["id"])["requeue"] is True
    tick(client)
    agent.beat()
    st = ctx.settings
    client.app.state.scheduler.tick(now=time.time() + st.requeue_after_s(st.grace_s) + 1)  # the node went silent
    failed, requeued = job(client, once["id"]), job(client, again["id"])
    assert failed["state"] == "failed" and "--no-requeue" in failed["reason"]
    assert requeued["state"] == "pending" and requeued["runs"] == 1


def test_a_no_requeue_job_its_agent_fenced_fails(client: AsgiClient, agent: FakeAgent) -> None:
    j = submit(client, gpus=1, requeue=False)
    tick(client)
    agent.beat()
    agent.running.pop(j["id"])
    agent.exited[j["id"]] = JobStatus(
        job_id=j["id"], state="exited", exit_code=143, signal=15, fenced=True, ended_at=time.time(), stopped=True,
        run=1,
    )
    agent.beat()
    ended = job(client, j["id"])
    assert ended["state"] == "failed" and "--no-requeue" in ended["reason"]


def test_a_job_being_stopped_when_its_node_goes_silent_keeps_that_in_its_history(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    """A job asked to stop (here: requeued by its owner) whose node then goes silent is requeued for the first
    reason, but its history says the node was lost: whatever it did after that (it may even have finished) is
    not known, which is why it runs again."""
    from sqlalchemy import select

    from nanum.store import EventRow

    j = submit(client, gpus=1)
    tick(client)
    agent.beat()
    assert client.post(f"/api/v1/jobs/{j['id']}/requeue", headers=auth(ADMIN)).status_code == 200
    st = ctx.settings
    client.app.state.scheduler.tick(now=time.time() + st.requeue_after_s(st.grace_s) + 1)  # it never got the stop
    requeued = job(client, j["id"])
    assert requeued["state"] == "pending" and requeued["runs"] == 1
    with ctx.db.read() as s:
        history = list(s.execute(select(EventRow.kind, EventRow.message).where(EventRow.job_id == j["id"])
                                 .order_by(EventRow.id)))
    kinds = [k for k, _ in history]
    assert kinds[kinds.index("requeue-requested"):] == ["requeue-requested", "lost", "requeued"]
    assert ("lost", "node gpu-01 stopped answering") in history
