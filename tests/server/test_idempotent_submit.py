"""A submission sent again with the same `client_request_id` (a retry after a lost answer) returns the job the
first one made: never a second job, also when both arrive at once."""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import func, select

from nanum.server.context import ServerContext
from nanum.store import JobRow
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ALICE, BOB, auth


def send(client: AsgiClient, request_id: str | None, token: str = ALICE, **body: Any) -> Any:
    body = {"command": ["python", "train.py"], "workdir": "/tmp", **body}
    if request_id is not None:
        body["client_request_id"] = request_id
    return client.post("/api/v1/jobs", json=body, headers=auth(token))


def count(ctx: ServerContext) -> int:
    with ctx.db.read() as s:
        return int(s.scalar(select(func.count()).select_from(JobRow)) or 0)


def test_the_same_request_id_returns_the_first_job(client: AsgiClient, ctx: ServerContext) -> None:
    first = send(client, "a1b2c3")
    again = send(client, "a1b2c3")
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"] and again.json()["state"] == "pending"
    assert count(ctx) == 1
    assert send(client, "d4e5f6").json()["id"] != first.json()["id"]
    assert send(client, None).status_code == send(client, None).status_code == 201  # no id: always a new job
    assert count(ctx) == 4


def test_request_ids_are_per_user(client: AsgiClient, ctx: ServerContext) -> None:
    mine, theirs = send(client, "same-id", ALICE), send(client, "same-id", BOB)
    assert mine.status_code == theirs.status_code == 201
    assert (mine.json()["user"], theirs.json()["user"]) == ("alice", "bob")
    assert count(ctx) == 2


def test_a_retry_after_the_job_was_cancelled_still_returns_it(client: AsgiClient) -> None:
    first = send(client, "r-1").json()
    client.post(f"/api/v1/jobs/{first['id']}/cancel", headers=auth(ALICE))
    again = send(client, "r-1")
    assert again.status_code == 200 and again.json()["id"] == first["id"] and again.json()["state"] == "cancelled"


def test_two_identical_requests_at_once_make_one_job(client: AsgiClient, ctx: ServerContext) -> None:
    answers: list[Any] = []
    start = threading.Barrier(8)

    def race() -> None:
        start.wait()
        answers.append(send(client, "at-once"))

    threads = [threading.Thread(target=race) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(a.status_code for a in answers) == [200] * 7 + [201], [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert count(ctx) == 1


def test_a_malformed_request_id_is_422(client: AsgiClient) -> None:
    for bad in ("", "x" * 65, "has space"):
        r = send(client, bad)
        assert r.status_code == 422 and r.json()["detail"].startswith("invalid client_request_id: "), r.text


def test_a_retry_that_a_check_would_now_refuse_still_returns_the_first_job(
        client: AsgiClient, ctx: ServerContext) -> None:
    """The first submission waited for a job that has failed since: sent anew it would be refused (the dependency
    can never be met), but as a retry of the first it returns the job that submission made."""
    before = send(client, None).json()
    first = send(client, "dep-1", after_ok=[str(before["id"])])
    assert first.status_code == 201, first.text
    client.post(f"/api/v1/jobs/{before['id']}/cancel", headers=auth(ALICE))
    fresh = send(client, "dep-2", after_ok=[str(before["id"])])
    assert fresh.status_code == 400 and "--keep-if-unmet" in fresh.text, fresh.text
    again = send(client, "dep-1", after_ok=[str(before["id"])])
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"], again.text
    assert count(ctx) == 2
