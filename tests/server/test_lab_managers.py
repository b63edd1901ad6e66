"""Lab managers: a professor manages their own lab (members, member limits within the lab's, the lab's jobs and
logs, its usage and budget) and nothing of any other lab."""

from __future__ import annotations

import httpx

from nanum.server.context import ServerContext
from nanum.server.schemas import UserIn
from nanum.server.services import accounts
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent

PROF, OTHER = "prof-token", "other-prof-token"
V1 = "/api/v1"


def call(client: AsgiClient, method: str, path: str, token: str, body: object = None) -> httpx.Response:
    return client.request(method, V1 + path, json=body, headers=auth(token))


def setup_managers(client: AsgiClient, ctx: ServerContext) -> None:
    accounts.create_user(ctx, UserIn(name="prof", labs=["vision"], unix_user="prof"), PROF)
    accounts.create_user(ctx, UserIn(name="other", labs=["nlp"], unix_user="other"), OTHER)
    accounts.create_user(ctx, UserIn(name="student", labs=["physics"]), "student-token")
    for lab, user in (("vision", "prof"), ("nlp", "other")):
        assert call(client, "PUT", f"/labs/{lab}/members/{user}", ADMIN, {"role": "manager"}).status_code == 200


def test_a_manager_adds_and_removes_members_of_their_lab_only(client: AsgiClient, ctx: ServerContext) -> None:
    setup_managers(client, ctx)
    r = call(client, "PUT", "/labs/vision/members/student", PROF, {"role": "member"})
    assert r.status_code == 200 and r.json()["role"] == "member"
    members = {m["user"]: m["role"] for m in call(client, "GET", "/labs/vision/members", PROF).json()}
    assert members == {"alice": "member", "bob": "member", "prof": "manager", "student": "member"}
    assert call(client, "GET", "/me", "student-token").json()["labs"] == ["physics", "vision"]
    assert call(client, "GET", "/labs/vision", "student-token").json()["managers"] == ["prof"]
    r = call(client, "PUT", "/labs/nlp/members/student", PROF, {"role": "member"})
    assert r.status_code == 403 and r.json()["detail"] == "only a manager of lab nlp or an admin may manage its members"
    r = call(client, "PUT", "/labs/vision/members/student", PROF, {"role": "manager"})
    assert r.status_code == 403 and r.json()["detail"] == "only an admin may make someone a manager of lab vision"
    assert call(client, "DELETE", "/labs/vision/members/student", PROF).status_code == 204
    assert call(client, "GET", "/me", "student-token").json()["labs"] == ["physics"]
    r = call(client, "DELETE", "/labs/nlp/members/bob", PROF)
    assert r.status_code == 403
    assert "nlp" in call(client, "GET", "/me", BOB).json()["labs"]


def test_member_limits_stay_within_the_labs_own(client: AsgiClient, ctx: ServerContext) -> None:
    setup_managers(client, ctx)
    assert call(client, "PATCH", "/labs/vision", ADMIN, {"max_gpus": 8, "max_running_jobs": 4}).status_code == 200
    r = call(client, "PATCH", "/labs/vision/members/alice", PROF, {"max_gpus": 2, "max_running_jobs": 1})
    assert r.status_code == 200 and (r.json()["max_gpus"], r.json()["max_running_jobs"]) == (2, 1)
    assert next(u for u in call(client, "GET", "/users", ADMIN).json() if u["name"] == "alice")["max_gpus"] == 2
    r = call(client, "PATCH", "/labs/vision/members/alice", PROF, {"max_gpus": 16})
    assert r.status_code == 400
    assert r.json()["detail"] == "lab vision allows max gpus of at most 8; give --max-gpus 8 or less"
    r = call(client, "PATCH", "/labs/vision/members/alice", PROF, {"max_gpus": None})
    assert r.status_code == 400  # no limit at all would be beyond the lab's 8
    r = call(client, "PATCH", "/labs/vision/members/bob", PROF, {"max_gpus": 1})
    assert r.status_code == 403 and r.json()["detail"] == (
        "bob is also a member of lab nlp, which you do not manage, and their limits hold there too; ask an admin "
        "to set them")
    assert call(client, "PATCH", "/labs/vision/members/bob", ADMIN, {"max_gpus": 1}).status_code == 200


def test_a_manager_sees_and_stops_their_labs_jobs_and_no_others(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    setup_managers(client, ctx)
    mine = submit(client, ALICE, gpus=1)
    theirs = submit(client, BOB, lab="nlp", gpus=1, env={"KEY": "secret"})
    tick(client)
    agent.beat()
    assert call(client, "GET", f"/jobs/{mine['id']}/logs", PROF).status_code == 200
    assert call(client, "GET", f"/jobs/{theirs['id']}/logs", PROF).status_code == 403
    assert call(client, "GET", f"/jobs/{theirs['id']}", PROF).json()["env"] is None
    assert call(client, "GET", f"/jobs/{theirs['id']}", OTHER).json()["env"] == {"KEY": "secret"}
    r = call(client, "POST", f"/jobs/{theirs['id']}/cancel", PROF)
    assert r.status_code == 403 and "only its owner, a manager of its lab or an admin" in r.json()["detail"]
    assert call(client, "POST", f"/jobs/{mine['id']}/cancel", PROF).status_code == 200
    agent.beat()
    agent.beat()
    assert job(client, mine["id"])["state"] == "cancelled"
    assert job(client, theirs["id"])["state"] == "running"
    held = submit(client, ALICE, gpus=4)
    assert call(client, "POST", f"/jobs/{held['id']}/hold", PROF).status_code == 200
    assert job(client, held["id"])["state"] == "held"
    assert call(client, "PATCH", "/labs/vision", ADMIN, {"monthly_gpu_hours": 100}).status_code == 200
    lab = call(client, "GET", "/labs/vision", PROF).json()
    assert lab["budget"]["budget_gpu_hours"] == 100 and lab["used_gpu_hours"] >= 0
    usage = call(client, "GET", "/usage?by=user&lab=vision", PROF)
    assert usage.status_code == 200
