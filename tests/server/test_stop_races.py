"""A job that ends on its own while the server is stopping it: a preempted job that ran to a successful end before
its agent could signal it completed (it must not run again); one that the agent did stop is requeued."""

from __future__ import annotations

import time

import pytest

from nanum.protocol import JobStatus
from nanum.server.context import ServerContext
from nanum.server.services import lifecycle
from nanum.store import JobRow
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import job, submit, tick
from tests.server.fakeagent import FakeAgent


def _preempt(ctx: ServerContext, job_id: int) -> None:
    with ctx.db.write() as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        lifecycle.request_stop(s, row, "preempt", time.time(), "a job within its guarantee needs the GPUs")


@pytest.mark.parametrize(
    ("stopped", "state", "runs"),
    [
        pytest.param(False, "completed", 1, id="ended-before-the-stop-reached-it"),
        pytest.param(True, "pending", 1, id="stopped-by-its-agent"),
        pytest.param(None, "pending", 1, id="agent-that-does-not-say"),
    ],
)
def test_a_job_that_ends_while_being_preempted(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent, stopped: bool | None, state: str, runs: int
) -> None:
    j = submit(client, gpus=1)
    tick(client)
    agent.beat()
    _preempt(ctx, j["id"])
    agent.running.pop(j["id"])
    agent.exited[j["id"]] = JobStatus(job_id=j["id"], state="exited", exit_code=0, stopped=stopped)
    agent.beat()
    after = job(client, j["id"])
    assert (after["state"], after["runs"]) == (state, runs)
    if state == "completed":
        tick(client)
        assert job(client, j["id"])["state"] == "completed"
