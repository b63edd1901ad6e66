"""Admin tiers through the real app and database: only admins set a job's tier (on submit and on modify), it shows
in the job and in `GET /priority`, and the scheduler starts a higher tier first."""

from __future__ import annotations

from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent

BODY = {"command": ["python", "train.py"], "workdir": "/tmp"}


def test_an_admin_sets_a_tier_on_submit_and_a_user_gets_403(client: AsgiClient) -> None:
    made = submit(client, ADMIN, tier=3)
    assert made["tier"] == 3 and job(client, made["id"])["tier"] == 3
    refused = client.post("/api/v1/jobs", json={**BODY, "tier": 2}, headers=auth(ALICE))
    assert refused.status_code == 403
    assert refused.json()["detail"].startswith("only an admin may set a job's tier; ask an admin")
    assert submit(client, ALICE, tier=0)["tier"] == 0  # the tier a new job has anyway: nothing to refuse
    mine = submit(client, ALICE)
    assert mine["tier"] == 0
    listed = client.get("/api/v1/jobs", headers=auth(BOB)).json()
    assert {j["id"]: j["tier"] for j in listed} == {made["id"]: 3, mine["id"] - 1: 0, mine["id"]: 0}


def test_tiers_out_of_range_are_refused_naming_the_field(client: AsgiClient) -> None:
    for tier in (-1, 10):
        r = client.post("/api/v1/jobs", json={**BODY, "tier": tier}, headers=auth(ADMIN))
        assert r.status_code == 422 and r.json()["detail"].startswith("invalid tier: input should be"), r.text
    j = submit(client)["id"]
    r = client.patch(f"/api/v1/jobs/{j}", json={"tier": 10}, headers=auth(ADMIN))
    assert r.status_code == 422 and r.json()["detail"].startswith("invalid tier: input should be"), r.text


def test_only_an_admin_changes_a_waiting_jobs_tier(client: AsgiClient) -> None:
    j = submit(client)["id"]
    r = client.patch(f"/api/v1/jobs/{j}", json={"tier": 1, "priority": 9}, headers=auth(ALICE))
    assert r.status_code == 403 and "only an admin may set a job's tier" in r.json()["detail"]
    assert (job(client, j)["tier"], job(client, j)["priority"]) == (0, 0)  # nothing of the refused change applied
    r = client.patch(f"/api/v1/jobs/{j}", json={"tier": 0, "priority": 9}, headers=auth(ALICE))
    assert r.status_code == 200 and (r.json()["tier"], r.json()["priority"]) == (0, 9)
    r = client.patch(f"/api/v1/jobs/{j}", json={"tier": 5}, headers=auth(ADMIN))
    assert r.status_code == 200 and r.json()["tier"] == 5
    r = client.patch(f"/api/v1/jobs/{j}", json={"tier": 5, "name": "kept"}, headers=auth(ALICE))
    assert r.status_code == 200 and r.json()["tier"] == 5  # sending the tier it has is no change
    r = client.patch(f"/api/v1/jobs/{j}", json={"tier": 0}, headers=auth(ALICE))
    assert r.status_code == 403 and job(client, j)["tier"] == 5  # nor may its owner take it down


def test_a_job_an_admin_put_in_a_higher_tier_starts_first_and_priority_shows_it(
    client: AsgiClient, agent: FakeAgent
) -> None:
    early = submit(client, gpus=4, priority=100)["id"]
    late, later = submit(client, BOB, gpus=4)["id"], submit(client, gpus=4)["id"]
    for j, tier in ((late, 2), (later, 1)):
        assert client.patch(f"/api/v1/jobs/{j}", json={"tier": tier}, headers=auth(ADMIN)).status_code == 200
    tick(client)
    agent.beat()
    assert [job(client, j)["state"] for j in (late, later, early)] == ["running", "pending", "pending"]
    got = client.get("/api/v1/priority", headers=auth(ALICE)).json()
    assert [(j["job_id"], j["rank"], j["tier"]) for j in got["jobs"]] == [(later, 1, 1), (early, 2, 0)]
    assert str(job(client, later)["reason"]).startswith("next in line")
    assert str(job(client, early)["reason"]).startswith("1 job ahead")
