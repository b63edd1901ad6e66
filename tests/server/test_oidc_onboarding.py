"""What disabling a user does, and tokens that have long expired: an admin disables and enables a user; a disabled
user's queued jobs stay in the queue with the reason and start once they are enabled again; directory users are
left to the directory; tokens a day past their expiry are purged."""

from __future__ import annotations

import time

from sqlalchemy import select, update

from nanum.server.context import ServerContext
from nanum.server.services import tokens
from nanum.server.web.data import queue
from nanum.store import TokenRow, UserRow
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent

REASON = "owner's account is disabled; an admin can enable it again (nanum user enable NAME)"


def test_a_disabled_users_queued_jobs_wait_and_start_once_enabled(client: AsgiClient, agent: FakeAgent) -> None:
    queued = submit(client, ALICE, gpus=1)
    assert client.post("/api/v1/users/alice/disable", headers=auth(BOB)).status_code == 403
    r = client.post("/api/v1/users/alice/disable", headers=auth(ADMIN))
    assert r.json() == {"name": "alice", "disabled": True}
    assert client.get("/api/v1/me", headers=auth(ALICE)).json()["detail"] == (
        "user alice is disabled; ask an admin if that is a mistake")
    tick(client)
    agent.beat()
    seen = client.get(f"/api/v1/jobs/{queued['id']}", headers=auth(ADMIN)).json()
    assert (seen["state"], seen["reason"], seen["reason_code"]) == ("pending", REASON, "disabled")
    listed = client.get("/api/v1/jobs", headers=auth(ADMIN)).json()
    assert [(j["user"], j["reason"]) for j in listed] == [("alice", REASON)]
    dashboard = queue(client.app.state.ctx)["pending"]  # what the Queue page shows
    assert [(j["id"], j["reason"]) for j in dashboard] == [(queued["id"], REASON)]
    bobs = submit(client, BOB, gpus=1)  # others' jobs start as before
    tick(client)
    assert client.get(f"/api/v1/jobs/{bobs['id']}", headers=auth(BOB)).json()["state"] == "running"
    assert client.post("/api/v1/users/alice/enable", headers=auth(ADMIN)).json() == {"name": "alice",
                                                                                      "disabled": False}
    assert queue(client.app.state.ctx)["pending"][0]["reason"] == "waiting for the scheduler"
    tick(client)
    assert job(client, queued["id"])["state"] == "running"


def test_directory_users_and_oneself_are_not_disabled_here(client: AsgiClient, ctx: ServerContext) -> None:
    with ctx.db.write() as s:
        s.execute(update(UserRow).where(UserRow.name == "bob").values(source="ldap"))
    r = client.post("/api/v1/users/bob/disable", headers=auth(ADMIN))
    assert (r.status_code, r.json()["detail"]) == (409, "bob comes from the directory, which decides whether they "
                                                        "may log in; disable the account there")
    r = client.post("/api/v1/users/admin/disable", headers=auth(ADMIN))
    assert (r.status_code, r.json()["detail"]) == (409, "you cannot disable yourself; ask another admin")
    r = client.post("/api/v1/users/nobody/enable", headers=auth(ADMIN))
    assert (r.status_code, r.json()["detail"]) == (404, "no user named nobody; `nanum user list` shows who there is")


def test_a_token_a_day_past_its_expiry_is_purged(client: AsgiClient, ctx: ServerContext) -> None:
    old = client.post("/api/v1/tokens", json={"name": "old laptop", "expires_in_s": 3600}, headers=auth(ALICE))
    recent = client.post("/api/v1/tokens", json={"name": "ci", "expires_in_s": 3600}, headers=auth(ALICE))
    with ctx.db.write() as s:
        s.execute(update(TokenRow).where(TokenRow.id == old.json()["id"]).values(expires=time.time() - 2 * 86400))
        s.execute(update(TokenRow).where(TokenRow.id == recent.json()["id"]).values(expires=time.time() - 60))
    names = [t["name"] for t in client.get("/api/v1/tokens", headers=auth(ALICE)).json()]
    assert names == ["first token", "old laptop", "ci"]
    client.post("/api/v1/tokens", json={"name": "new laptop", "expires_in_s": 3600}, headers=auth(ALICE))
    names = [t["name"] for t in client.get("/api/v1/tokens", headers=auth(ALICE)).json()]
    assert names == ["first token", "ci", "new laptop"]  # ci says when it expired for a day yet
    with ctx.db.read() as s:
        assert s.scalars(select(TokenRow.name).where(TokenRow.name == "old laptop")).all() == []
    assert client.get("/api/v1/me", headers=auth(old.json()["token"])).json()["detail"] == (
        "unknown API token; check NANUM_TOKEN or run `nanum login` again")
    assert tokens.purge_expired(ctx, time.time() + 3 * 86400) == 2
    later = client.post("/api/v1/tokens", json={"name": "ci 2", "expires_in_s": 60}, headers=auth(ALICE))
    assert client.app.state.monitoring.maintain(time.time() + 2 * 86400)["tokens"] == 1  # the upkeep purges too
    assert later.json()["name"] not in [t["name"] for t in client.get("/api/v1/tokens", headers=auth(ALICE)).json()]
