"""One user may have at most the server's `--max-jobs-per-user` jobs waiting, held or running (Slurm's
MaxSubmitJobs): a submission past it is refused with the count and what to do, arrays count every task, other
users are untouched, and a job that ends makes room again."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from nanum.server.context import ServerContext
from nanum.server.services import jobs
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ALICE, BOB, auth, submit, tick
from tests.server.fakeagent import FakeAgent


@pytest.fixture
def ctx(ctx: ServerContext) -> ServerContext:
    ctx.settings = dataclasses.replace(ctx.settings, max_jobs_per_user=5)
    return ctx


def send(client: AsgiClient, token: str = ALICE, **body: Any) -> Any:
    return client.post("/api/v1/jobs", json={"command": ["python", "train.py"], "workdir": "/tmp", **body},
                       headers=auth(token))


def test_a_submission_past_the_cap_is_refused_and_names_what_is_left(client: AsgiClient, agent: FakeAgent) -> None:
    running = submit(client, gpus=1)
    tick(client)
    agent.beat()  # it starts
    held = submit(client)
    assert client.post(f"/api/v1/jobs/{held['id']}/hold", headers=auth(ALICE)).status_code == 200
    submit(client)
    r = send(client, array="0-2")
    assert r.status_code == 409, r.text
    assert r.json()["detail"] == (
        "user alice has 3 jobs waiting or running; 3 more would pass the 5 one user may have (the server's "
        "--max-jobs-per-user): submit at most 2 now, or wait for some to end, or cancel some (nanum cancel)")
    assert send(client, array="0-1").status_code == 201
    r = send(client)
    assert r.status_code == 409 and "submit at most" not in r.json()["detail"], r.text
    assert send(client, BOB).status_code == 201  # another user's jobs are theirs to count

    assert client.post(f"/api/v1/jobs/{held['id']}/cancel", headers=auth(ALICE)).status_code == 200
    assert send(client).status_code == 201  # the cancelled job made room
    assert send(client).status_code == 409
    agent.exit(running["id"])
    agent.beat()
    assert send(client).status_code == 201  # and so did the one that ended


def test_more_tasks_than_the_cap_at_once_say_so(client: AsgiClient) -> None:
    r = send(client, array="0-9")
    assert r.status_code == 409, r.text
    assert r.json()["detail"].startswith("an array of 10 tasks is more than the 5 jobs one user may have")


def test_a_retry_of_a_job_already_in_is_answered_at_the_cap(client: AsgiClient) -> None:
    first = send(client, client_request_id="run-42")
    for _ in range(4):
        submit(client)
    again = send(client, client_request_id="run-42")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]


def test_the_cap_holds_exactly_however_many_submissions_pass_between_counts(
    client: AsgiClient, ctx: ServerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Submissions far from the cap are let through without counting (`ROOM_UNCOUNTED` of them after a count);
    on one server the cap is still exact."""
    ctx.settings = dataclasses.replace(ctx.settings, max_jobs_per_user=30)
    monkeypatch.setattr(jobs, "ROOM_UNCOUNTED", 4)
    taken = [send(client).status_code for _ in range(25)] + [send(client, array="0-4").status_code]
    assert taken == [201] * 26
    r = send(client)
    assert r.status_code == 409 and r.json()["detail"].startswith("user alice has 30 jobs waiting or running"), r.text
