"""Logging in with a directory password against a real OpenLDAP (slapd): the user is made from the directory's
posixAccount (uid, uidNumber, mail) with labs from its groups, gets a token that expires, and is refused once the
directory disables or removes them; their queued jobs stay, visible to admins."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from nanum.server.app import create_app
from nanum.server.context import ServerContext
from nanum.server.schemas import UserIn
from nanum.server.services import accounts, logins
from nanum.server.settings import LdapSettings, ServerSettings
from nanum.store import Database
from tests.directory import Directory
from tests.server.asgiclient import AsgiClient, serve
from tests.server.conftest import ADMIN, auth

GROUP_LAB = r"^cn=(.*)-lab,ou=groups"


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[Directory]:
    with Directory(tmp_path) as d:
        d.add_user("kim", uid_number=2001, password="kim-pw", groups=("vision-lab", "nlp-lab", "staff"),
                   mail="kim@uni.example")
        d.add_user("lee", uid_number=2002, password="lee-pw", groups=("vision-lab",))
        d.disable("lee")
        yield d


@pytest.fixture
def client(database: Database, tmp_path: Path, directory: Directory, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[AsgiClient]:
    # A server's failed logins are counted per directory URL and name for its lifetime: a test's directory may get
    # the port an earlier test's had, and must not inherit that test's failures.
    monkeypatch.setattr(logins, "_failures", {})
    monkeypatch.setattr(logins, "_checked", {})
    ldap = LdapSettings(url=directory.url, base=directory.base, bind_dn=directory.admin_dn,
                        bind_password=directory.admin_password, group_lab=GROUP_LAB, recheck_s=0,
                        token_lifetime_s=7 * 86400)
    ctx = ServerContext.create(ServerSettings(home=tmp_path / "home", ldap=ldap), database)
    accounts.create_user(ctx, UserIn(name="admin", labs=["default"], admin=True), ADMIN)
    app = create_app(ctx, run_scheduler=False)
    with serve(app) as c:
        yield c
    app.state.scheduler.leadership.release()


def login(client: AsgiClient, username: str, password: str) -> httpx.Response:
    return client.post("/api/v1/login", json={"username": username, "password": password, "token_name": "laptop"})


def test_a_first_login_makes_the_user_from_the_directory(client: AsgiClient) -> None:
    assert client.get("/api/v1/auth").json() == {"token": True, "password": True, "directory": "ldap", "oidc": None}
    r = login(client, "kim", "kim-pw")
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["name"], body["unix_user"], body["labs"]) == ("kim", "kim", ["nlp", "vision"])
    assert body["expires"] is not None
    me = client.get("/api/v1/me", headers=auth(body["token"])).json()
    assert (me["unix_user"], me["labs"], me["default_lab"]) == ("kim", ["nlp", "vision"], "nlp")
    ctx: ServerContext = client.app.state.ctx
    with ctx.db.read() as s:
        from sqlalchemy import select

        from nanum.store import UserRow

        user = s.scalars(select(UserRow).where(UserRow.name == "kim")).one()
        assert (user.uid_number, user.email, user.source) == (2001, "kim@uni.example", "ldap")
    tokens = client.get("/api/v1/tokens", headers=auth(body["token"])).json()
    assert [t["name"] for t in tokens] == ["first token", "laptop"] and tokens[1]["expires"] is not None
    again = login(client, "kim", "kim-pw").json()
    assert again["labs"] == ["nlp", "vision"]  # the same user, brought up to date


@pytest.mark.parametrize(("username", "password", "message"), [
    pytest.param("kim", "wrong", "wrong username or password", id="wrong-password"),
    pytest.param("kim", "", "wrong username or password", id="empty-password"),
    pytest.param("nobody", "x", "wrong username or password", id="unknown"),
    pytest.param("kim)(uid=*", "kim-pw", "wrong username or password", id="filter-injection"),
    pytest.param("lee", "lee-pw", "the directory account lee is expired; ask your administrator", id="disabled"),
])
def test_a_login_the_directory_refuses_makes_nothing(
    client: AsgiClient, username: str, password: str, message: str
) -> None:
    r = login(client, username, password)
    assert (r.status_code, r.json()["detail"]) == (401, message)
    names = [u["name"] for u in client.get("/api/v1/users", headers=auth(ADMIN)).json()]
    assert names == ["admin"]


def test_a_user_the_directory_disables_or_removes_is_refused_and_their_jobs_stay(
    client: AsgiClient, directory: Directory
) -> None:
    kim = login(client, "kim", "kim-pw").json()["token"]
    job = client.post("/api/v1/jobs", json={"command": ["true"], "gpus": 0, "workdir": "/tmp"}, headers=auth(kim))
    assert job.status_code == 201, job.text
    directory.disable("kim")
    r = client.post("/api/v1/jobs", json={"command": ["true"], "gpus": 0, "workdir": "/tmp"}, headers=auth(kim))
    assert r.status_code == 401
    assert r.json()["detail"] == ("user kim is disabled: the directory account is expired; ask an admin if that is "
                                  "a mistake")
    assert login(client, "kim", "kim-pw").status_code == 401
    queued = client.get("/api/v1/jobs", headers=auth(ADMIN)).json()
    assert [(j["user"], j["state"]) for j in queued] == [("kim", "pending")]
    directory.add_user("ann", uid_number=2003, password="ann-pw", groups=("vision-lab",))
    ann = login(client, "ann", "ann-pw").json()["token"]
    directory.remove("ann")
    assert client.get("/api/v1/me", headers=auth(ann)).json()["detail"] == (
        "user ann is disabled: the directory account is no longer in the directory; ask an admin if that is a "
        "mistake")


def test_the_web_form_logs_in_with_the_directory_password(client: AsgiClient) -> None:
    form = client.get("/login")
    assert 'name="username"' in form.text and 'name="password"' in form.text
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    assert nonce is not None
    cookies = {"nanum_login": form.cookies["nanum_login"]}
    client.cookies.clear()
    wrong = client.post("/login", data={"username": "kim", "password": "no", "nonce": nonce[1], "next": "/queue"},
                        headers={"Cookie": f"nanum_login={cookies['nanum_login']}"})
    assert wrong.status_code == 401 and "wrong username or password" in wrong.text and 'value="kim"' in wrong.text
    client.cookies.clear()
    form = client.get("/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    assert nonce is not None
    ok = client.post("/login", data={"username": "kim", "password": "kim-pw", "nonce": nonce[1], "next": "/queue"},
                     headers={"Cookie": f"nanum_login={form.cookies['nanum_login']}"})
    assert ok.status_code == 303 and ok.headers["location"] == "/queue", ok.text
    client.cookies.clear()
    page = client.get("/queue", headers={"Cookie": f"nanum_session={ok.cookies['nanum_session']}"})
    assert page.status_code == 200 and "kim" in page.text


def test_password_guessing_is_stopped_for_that_name_only(client: AsgiClient) -> None:
    for _ in range(5):
        assert login(client, "kim", "guess").status_code == 401
    r = login(client, "kim", "kim-pw")
    assert r.status_code == 429
    assert r.json()["detail"] == "too many failed logins for kim; wait 5 minutes and try again"
    assert login(client, "KIM", "kim-pw").status_code == 429
    directory_users = client.post("/api/v1/login", json={"username": "nobody", "password": "x"})
    assert directory_users.status_code == 401  # another name is not held back
