"""Per-user API tokens: more than one, each with a name and an expiry; listed without their values, revoked at
once; expired ones refused with when they expired; a disabled user refused whatever token they hold."""

from __future__ import annotations

import time

from sqlalchemy import update

from nanum.server.context import ServerContext
from nanum.store import TokenRow, UserRow
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth


def new_token(client: AsgiClient, token: str, name: str, expires_in_s: float | None = None) -> dict[str, object]:
    r = client.post("/api/v1/tokens", json={"name": name, "expires_in_s": expires_in_s}, headers=auth(token))
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def test_a_user_makes_lists_and_revokes_their_tokens(client: AsgiClient) -> None:
    laptop = new_token(client, ALICE, "laptop", 30 * 86400)
    assert client.get("/api/v1/me", headers=auth(str(laptop["token"]))).json()["name"] == "alice"
    listed = client.get("/api/v1/tokens", headers=auth(ALICE)).json()
    assert [(t["id"], t["name"]) for t in listed] == [(0, "first token"), (laptop["id"], "laptop")]
    assert listed[1]["expires"] is not None and listed[1]["last_used"] is not None
    assert "token" not in listed[1]
    assert client.get("/api/v1/tokens", params={"user": "alice"}, headers=auth(BOB)).status_code == 403
    assert [t["name"] for t in client.get("/api/v1/tokens", params={"user": "alice"}, headers=auth(ADMIN)).json()] \
        == ["first token", "laptop"]
    r = client.request("DELETE", f"/api/v1/tokens/{laptop['id']}", headers=auth(BOB))
    assert r.status_code == 404  # bob has no such token; alice's stays
    assert client.get("/api/v1/me", headers=auth(str(laptop["token"]))).status_code == 200
    assert client.request("DELETE", f"/api/v1/tokens/{laptop['id']}", headers=auth(ALICE)).status_code == 204
    r = client.get("/api/v1/me", headers=auth(str(laptop["token"])))
    assert r.status_code == 401 and r.json()["detail"].startswith("unknown API token")


def test_revoking_the_first_token_ends_it(client: AsgiClient) -> None:
    spare = new_token(client, BOB, "spare")
    assert client.request("DELETE", "/api/v1/tokens/0", headers=auth(BOB)).status_code == 204
    assert client.get("/api/v1/me", headers=auth(BOB)).status_code == 401
    assert client.get("/api/v1/me", headers=auth(str(spare["token"]))).json()["name"] == "bob"


def test_an_expired_token_is_refused_with_when_it_expired(client: AsgiClient, ctx: ServerContext) -> None:
    short = new_token(client, ALICE, "ci", 3600)
    with ctx.db.write() as s:
        s.execute(update(TokenRow).where(TokenRow.id == short["id"]).values(expires=time.time() - 1))
    ctx.caches.callers.clear()
    r = client.get("/api/v1/me", headers=auth(str(short["token"])))
    assert r.status_code == 401
    assert r.json()["detail"].startswith("this API token (ci) expired at 20")
    assert r.json()["detail"].endswith("run `nanum login` again or create a new one with `nanum token create`")


def test_a_token_expires_when_the_servers_clock_passes_its_expiry(client: AsgiClient, ctx: ServerContext) -> None:
    short = new_token(client, ALICE, "ci", 3600)
    assert client.get("/api/v1/me", headers=auth(str(short["token"]))).status_code == 200
    ctx.clock = lambda: time.time() + 3601  # an hour on, without waiting one
    ctx.caches.callers.clear()
    r = client.get("/api/v1/me", headers=auth(str(short["token"])))
    assert r.status_code == 401 and r.json()["detail"].startswith("this API token (ci) expired at 20")


def test_a_disabled_user_is_refused_with_any_token(client: AsgiClient, ctx: ServerContext) -> None:
    extra = new_token(client, ALICE, "laptop")
    with ctx.db.write() as s:
        s.execute(update(UserRow).where(UserRow.name == "alice").values(disabled=True))
    ctx.caches.callers.clear()
    for token in (ALICE, str(extra["token"])):
        r = client.get("/api/v1/jobs", headers=auth(token))
        assert r.status_code == 401
        assert r.json()["detail"] == "user alice is disabled; ask an admin if that is a mistake"
