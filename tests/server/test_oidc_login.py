"""Single sign-on against a real OpenID Connect provider (tests/oidc_provider.py, Authlib's server over HTTP):
an ID token from the provider becomes a user in the labs of their groups with a token that expires; forged,
expired, foreign and other-client tokens are refused with a sentence saying which; a disabled user is refused;
the dashboard's code flow (PKCE, state, nonce) ends in a session."""

from __future__ import annotations

import re
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import OctKey, RSAKey
from sqlalchemy import select

from nanum.server.app import create_app
from nanum.server.context import ServerContext
from nanum.server.schemas import UserIn
from nanum.server.services import accounts
from nanum.server.settings import OidcSettings, ServerSettings
from nanum.store import Database, UserRow
from tests.oidc_provider import Provider
from tests.server.asgiclient import AsgiClient, serve
from tests.server.conftest import ADMIN, auth


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    with Provider(client_id="nanum", client_secret="client-secret-1") as p:
        p.add_user("kim", "kim-pw", groups=("/vision", "/nlp", "/vision-managers", "staff users"),
                   email="kim@uni.example")
        p.add_user("lee", "lee-pw", groups=("/vision",))
        yield p


@pytest.fixture
def client(database: Database, tmp_path: Path, provider: Provider) -> Iterator[AsgiClient]:
    oidc = OidcSettings(issuer=provider.issuer, client_id="nanum", client_secret="client-secret-1",
                        manager_group=r"^/(.*)-managers$", token_lifetime_s=86400, name="Test SSO")
    ctx = ServerContext.create(ServerSettings(home=tmp_path / "home", oidc=oidc), database)
    accounts.create_user(ctx, UserIn(name="admin", labs=["default"], admin=True), ADMIN)
    app = create_app(ctx, run_scheduler=False)
    with serve(app) as c:
        yield c
    app.state.scheduler.leadership.release()


def exchange(client: AsgiClient, id_token: str) -> httpx.Response:
    return client.post("/api/v1/login/oidc", json={"id_token": id_token, "token_name": "laptop"})


def users(client: AsgiClient) -> list[str]:
    return [u["name"] for u in client.get("/api/v1/users", headers=auth(ADMIN)).json()]


def test_an_id_token_makes_the_user_in_the_labs_of_their_groups(client: AsgiClient, provider: Provider) -> None:
    assert client.get("/api/v1/auth").json()["oidc"] == {"issuer": provider.issuer, "client_id": "nanum",
                                                         "name": "Test SSO"}
    kim = provider.people["kim"]
    r = exchange(client, provider.sign(provider.claims(kim)))
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["name"], body["unix_user"], body["labs"]) == ("kim", "kim", ["nlp", "vision"])
    assert body["expires"] is not None
    me = client.get("/api/v1/me", headers=auth(body["token"])).json()
    assert (me["name"], me["labs"], me["unix_user"]) == ("kim", ["nlp", "vision"], "kim")
    members = client.get("/api/v1/labs/vision/members", headers=auth(ADMIN)).json()
    assert {(m["user"], m["role"]) for m in members} == {("kim", "manager")}
    ctx: ServerContext = client.app.state.ctx
    with ctx.db.read() as s:
        row = s.scalars(select(UserRow).where(UserRow.name == "kim")).one()
        assert (row.source, row.oidc_issuer, row.oidc_subject, row.email) == (
            "oidc", provider.issuer, kim.sub, "kim@uni.example")
    # The same person (by issuer and subject) under a new name at the provider is the same user here.
    again = exchange(client, provider.sign({**provider.claims(kim), "groups": ["/nlp"]}))
    assert again.json()["labs"] == ["nlp"] and users(client) == ["admin", "kim"]


MAC_KEY = "anyone-may-know-this-32-bytes-ok"  # an HMAC "signature" anyone could make: never accepted


def _claims(provider: Provider, **changes: object) -> dict[str, object]:
    return {**provider.claims(provider.people["lee"]), **changes}


@pytest.mark.parametrize(("forge", "message"), [
    pytest.param(lambda p: p.sign(_claims(p), RSAKey.generate_key(2048, parameters={"kid": "test-key-1"})),
                 "the ID token's signature does not match the keys of {issuer}; it was not issued by the configured "
                 "provider", id="forged"),
    pytest.param(lambda p: p.sign(_claims(p), RSAKey.generate_key(2048, parameters={"kid": "not-published"})),
                 "the ID token is signed with a key {issuer} does not publish; it was not issued by the configured "
                 "provider", id="unknown-key"),
    pytest.param(lambda p: jwt.encode({"alg": "HS256"}, _claims(p), OctKey.import_key(MAC_KEY)),
                 "that is not an ID token this server can read (unsupported_algorithm)", id="mac-signed"),
    pytest.param(lambda p: p.sign(_claims(p, exp=1_700_000_000, iat=1_699_999_000)),
                 "the ID token expired at 2023-11-14 22:13:20 UTC; log in again", id="expired"),
    pytest.param(lambda p: p.sign(_claims(p, aud="another-app")),
                 "the ID token is for another client (another-app), not this server's client nanum",
                 id="wrong-audience"),
    pytest.param(lambda p: p.sign(_claims(p, iss="https://evil.example")),
                 "the ID token was issued by 'https://evil.example', not by {issuer}", id="wrong-issuer"),
    pytest.param(lambda p: "not.a.token",
                 "that is not an ID token this server can read", id="garbage"),
    pytest.param(lambda p: p.sign(_claims(p, preferred_username="../root")),
                 "the ID token's preferred_username claim gives no usable user name ('../root')", id="bad-name"),
])
def test_a_bad_id_token_is_refused_with_why_and_makes_nobody(
    client: AsgiClient, provider: Provider, forge: object, message: str
) -> None:
    assert callable(forge)
    r = exchange(client, forge(provider))
    assert r.status_code == 401
    assert r.json()["detail"].startswith(message.format(issuer=provider.issuer)), r.json()["detail"]
    assert users(client) == ["admin"]


def test_a_disabled_user_is_refused_and_a_taken_name_is_not_handed_over(
    client: AsgiClient, provider: Provider
) -> None:
    lee = exchange(client, provider.sign(provider.claims(provider.people["lee"]))).json()
    ctx: ServerContext = client.app.state.ctx
    with ctx.db.write() as s:
        s.scalars(select(UserRow).where(UserRow.name == "lee")).one().disabled = True
    ctx.caches.callers.clear()
    r = exchange(client, provider.sign(provider.claims(provider.people["lee"])))
    assert (r.status_code, r.json()["detail"]) == (401, "user lee is disabled; ask an admin if that is a mistake")
    assert client.get("/api/v1/me", headers=auth(lee["token"])).status_code == 401
    impostor = provider.add_user("admin", "x", groups=("/vision",))
    r = exchange(client, provider.sign(provider.claims(impostor)))
    assert r.status_code == 409
    assert r.json()["detail"] == ("the user name admin is taken by someone who does not log in with single sign-on; "
                                  "an admin must rename or remove that user first")
    del provider.people["admin"]


def test_the_dashboard_logs_in_by_the_code_flow(client: AsgiClient, provider: Provider) -> None:
    page = client.get("/login")
    assert 'href="/login/oidc?next=/"' in page.text and "Log in with Test SSO" in page.text
    start = client.get("/login/oidc", params={"next": "/labs"})
    assert start.status_code == 303
    url = start.headers["location"]
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    assert url.startswith(f"{provider.issuer}/authorize?") and query["code_challenge_method"] == "S256"
    assert query["redirect_uri"] == "http://nanum.test/login/oidc/callback" and query["nonce"] and query["state"]
    assert httpx.post(url, data={"username": "kim", "password": "wrong"}).status_code == 401
    back = httpx.post(url, data={"username": "kim", "password": "kim-pw"})
    assert back.status_code == 302 and back.headers["location"].startswith("http://nanum.test/login/oidc/callback?")
    callback = back.headers["location"].removeprefix("http://nanum.test")
    flow = client.cookies.get("nanum_oidc")
    forged_state = client.get(re.sub(r"state=[^&]+", "state=someone-elses", callback))
    assert forged_state.status_code == 400 and "does not belong to a login started here" in forged_state.text
    assert client.cookies.get("nanum_oidc") is None  # a wrong answer ends that login
    client.cookies.set("nanum_oidc", flow, domain="nanum.test", path="/login/oidc")
    done = client.get(callback)
    assert done.status_code == 200, done.text
    assert 'content="0;url=/labs"' in done.text and "nanum_session" in done.cookies
    labs = client.get("/labs")
    assert labs.status_code == 200 and "kim" in labs.text and "vision" in labs.text
    replay = client.get(callback)  # the flow cookie is gone, and the provider would not take the code twice
    assert replay.status_code == 400


def test_the_provider_down_is_said_plainly(database: Database, tmp_path: Path) -> None:
    oidc = OidcSettings(issuer="http://127.0.0.1:9", client_id="nanum", timeout_s=2)
    ctx = ServerContext.create(ServerSettings(home=tmp_path / "home", oidc=oidc), database)
    app = create_app(ctx, run_scheduler=False)
    with serve(app) as c:
        started = time.monotonic()
        r = c.post("/api/v1/login/oidc", json={"id_token": "a.b.c"})
        assert r.status_code == 503 and "cannot be reached just now" in r.json()["detail"]
        assert time.monotonic() - started < 5
        page = c.get("/login/oidc")
        assert page.status_code == 503 and "cannot be reached just now" in page.text
    app.state.scheduler.leadership.release()
