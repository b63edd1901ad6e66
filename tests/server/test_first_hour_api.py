"""A new user's first hour, through the API: what used to be accepted and then fail later is refused or warned
about at once, with what to do instead."""

from __future__ import annotations

from nanum.server.context import ServerContext
from nanum.server.schemas import UserIn
from nanum.server.services import accounts
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, auth, submit
from tests.server.fakeagent import FakeAgent


def test_a_job_that_would_run_as_root_is_refused_at_submit(client: AsgiClient, ctx: ServerContext) -> None:
    accounts.create_user(ctx, UserIn(name="root", labs=["default"], admin=True), "root-token")
    accounts.create_user(ctx, UserIn(name="ops", labs=["default"], unix_user="root"), "ops-token")
    for token, name in (("root-token", "root"), ("ops-token", "ops")):
        r = client.post("/api/v1/jobs", json={"command": ["python", "train.py"], "workdir": "/tmp"},
                        headers=auth(token))
        assert r.status_code == 400, r.text
        assert r.json()["detail"] == (
            f"user {name}'s jobs would run as root, which this server refuses; add yourself as a user with a "
            "normal Unix account (`nanum user add NAME --unix-user NAME --lab LAB`) and submit with the token it "
            "prints, or restart nanum with --allow-root-jobs")
    assert client.get("/api/v1/jobs", headers=auth("root-token")).json() == []


def test_root_jobs_are_accepted_where_the_server_allows_them(client: AsgiClient, ctx: ServerContext) -> None:
    accounts.create_user(ctx, UserIn(name="root", labs=["default"], admin=True), "root-token")
    object.__setattr__(ctx.settings, "allow_root_jobs", True)
    assert submit(client, "root-token")["state"] == "pending"


def test_a_guarantee_larger_than_the_cluster_is_accepted_with_a_warning(client: AsgiClient, agent: FakeAgent) -> None:
    r = client.patch("/api/v1/labs/vision", json={"guaranteed_gpus": 8}, headers=auth(ADMIN))
    assert r.status_code == 200 and r.json()["guaranteed_gpus"] == 8
    assert r.json()["warning"] == ("lab vision is guaranteed 8 GPUs but the cluster has 4; the guarantee cannot be "
                                   "met until more GPUs join (see `nanum nodes`)")
    r = client.patch("/api/v1/labs/vision", json={"guaranteed_gpus": 3}, headers=auth(ADMIN))
    assert r.json()["warning"] is None
    r = client.post("/api/v1/labs", json={"name": "nlp2", "guaranteed_gpus": 2}, headers=auth(ADMIN))
    assert r.status_code == 201 and r.json()["warning"] == (
        "the labs' guarantees add up to 5 GPUs but the cluster has 4; not every lab can get its guarantee at once "
        "(see `nanum lab list`)")
    assert client.patch("/api/v1/labs/nlp2", json={"weight": 2}, headers=auth(ADMIN)).json()["warning"] is None
