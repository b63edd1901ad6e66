"""`nanum lab member ...`, `nanum user import`, `nanum token ...` as a user types them, against a scripted server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Nanum
from tests.cli.fakeapi import FakeApi


def test_lab_member_commands(api: FakeApi, nanum: Nanum) -> None:
    api.on("PUT", "/labs/vision/members/erin", {"lab": "vision", "user": "erin", "role": "manager",
                                                "unix_user": "erin"})
    api.on("GET", "/labs/vision/members", [
        {"lab": "vision", "user": "alice", "role": "member", "unix_user": "alice", "max_gpus": 2,
         "max_running_jobs": None, "monthly_gpu_hours": None},
        {"lab": "vision", "user": "erin", "role": "manager", "unix_user": None, "max_gpus": None,
         "max_running_jobs": None, "monthly_gpu_hours": None}])
    api.on("PATCH", "/labs/vision/members/alice", {"lab": "vision", "user": "alice", "role": "member",
                                                   "unix_user": "alice", "max_gpus": 2, "max_running_jobs": 1,
                                                   "monthly_gpu_hours": None})
    api.on("DELETE", "/labs/vision/members/alice", None)
    assert nanum("lab", "member", "add", "vision", "erin", "--manager").stdout == "erin is a manager of lab vision\n"
    assert api.sent("PUT", "/labs/vision/members/erin")[0].body == {"role": "manager"}
    listed = nanum("lab", "member", "list", "vision").stdout.splitlines()
    assert listed[0].split() == ["alice", "member", "alice", "max", "gpus", "2"]
    assert listed[1].split()[:3] == ["erin", "manager", "-"]
    done = nanum("lab", "member", "set", "vision", "alice", "--max-gpus", "2", "--max-running-jobs", "1")
    assert done.stdout == "alice in lab vision: max gpus 2, max running jobs 1\n"
    assert api.sent("PATCH", "/labs/vision/members/alice")[0].body == {"max_gpus": 2, "max_running_jobs": 1}
    assert nanum("lab", "member", "remove", "vision", "alice").stdout == "Removed alice from lab vision\n"


def test_a_refused_member_change_is_one_line(api: FakeApi, nanum: Nanum) -> None:
    api.on("PUT", "/labs/nlp/members/bob", {"detail": "only a manager of lab nlp or an admin may manage its members"},
           status=403)
    result = nanum("lab", "member", "add", "nlp", "bob")
    assert (result.exit_code, result.stderr) == (
        2, "nanum: error: only a manager of lab nlp or an admin may manage its members\n")


def test_user_import_reads_the_csv_and_refuses_a_bad_line(api: FakeApi, nanum: Nanum, tmp_path: Path) -> None:
    users = tmp_path / "users.csv"
    users.write_text("Name,Unix account,Labs,Role,E-mail\nkim,kim,vision; nlp,Manager,k@x.org\nlee,,,,\n")
    api.on("POST", "/users/import", {"created": [], "changed": [], "unchanged": ["kim", "lee"], "dry_run": False})
    result = nanum("user", "import", str(users))
    assert (result.exit_code, result.stdout) == (0, "0 created, 0 changed, 2 unchanged\n")
    assert api.sent("POST", "/users/import")[0].body == {"dry_run": False, "users": [
        {"name": "kim", "unix_user": "kim", "labs": ["vision", "nlp"], "role": "manager", "email": "k@x.org"},
        {"name": "lee", "unix_user": None, "labs": [], "role": "member", "email": None}]}
    users.write_text("name,labs,role\nkim,vision,boss\n")
    result = nanum("user", "import", str(users))
    assert (result.exit_code, result.stderr) == (
        2, f"nanum: error: {users} line 2: role 'boss' is not member, manager or admin\n")
    users.write_text("name,group\nkim,vision\n")
    result = nanum("user", "import", str(users))
    assert result.stderr == (f"nanum: error: {users}: the header must name the columns name, unix_user, labs, role, "
                             "email (unknown column 'group')\n")


def test_token_commands(api: FakeApi, nanum: Nanum) -> None:
    api.on("GET", "/tokens", [
        {"id": 0, "name": "first token", "created": "2026-11-30T09:00:00.000Z", "expires": None, "last_used": None},
        {"id": 3, "name": "login on laptop", "created": "2026-12-01T10:00:00.000Z",
         "expires": "2026-12-31T10:00:00.000Z", "last_used": "2026-12-01T11:30:12.000Z"}])
    api.on("POST", "/tokens", {"id": 4, "name": "ci", "token": "tok-new", "created": "2026-12-01T12:00:00.000Z",
                               "expires": "2026-12-02T12:00:00.000Z", "last_used": None}, status=201)
    api.on("DELETE", "/tokens/3", None)
    listed = nanum("token", "list").stdout.splitlines()
    assert listed[1].split() == ["0", "first", "token", "2026-11-30", "09:00", "never", "-"]
    assert listed[2].split() == ["3", "login", "on", "laptop", "2026-12-01", "10:00", "2026-12-31", "10:00",
                                 "2026-12-01", "11:30"]
    assert nanum("token", "create", "ci", "--expires", "1d").stdout == "tok-new\n"
    assert api.sent("POST", "/tokens")[0].body == {"name": "ci", "expires_in_s": 86400}
    assert nanum("token", "revoke", "3").stdout == "Revoked token 3\n"
    assert nanum("token", "revoke", "3", "--user", "bob").stdout == "Revoked token 3 of bob\n"
    assert api.sent("DELETE", "/tokens/3")[1].query == {"user": ["bob"]}


def test_an_empty_expiry_is_refused_not_read_as_never(api: FakeApi, nanum: Nanum) -> None:
    """`--expires "$TTL"` with TTL unset made a token that never lapses."""
    result = nanum("token", "create", "ci", "--expires", "")
    assert result.exit_code == 2 and "--expires: cannot read ''" in result.stderr
    assert api.requests == []


@pytest.mark.parametrize("given", ["1_0", "\u00b2", "-1", "+3"])
def test_a_token_id_is_digits_only(api: FakeApi, nanum: Nanum, given: str) -> None:
    """Python's int reads '1_0' as 10: `nanum token revoke 1_0` revoked token 10."""
    result = nanum("token", "revoke", "--", given)
    assert result.exit_code == 2 and f"{given!r} is not a number; give digits only" in result.stderr
    assert api.requests == []


def test_login_asks_a_directory_name_and_password_without_echo(api: FakeApi) -> None:
    import json

    from nanum.config import credentials_path

    api.on("GET", "/auth", {"token": True, "password": True, "directory": "ldap"})
    api.on("POST", "/login", {"name": "kim", "unix_user": "kim", "labs": ["vision"], "token": "tok-kim",
                              "expires": "2026-12-31T10:00:00.000Z"})
    api.on("GET", "/me", {"name": "kim", "admin": False, "labs": ["vision"], "default_lab": "vision",
                          "unix_user": "kim"})
    runner = Nanum(None)
    result = runner.runner.invoke(runner.app, ["login", api.url], input="kim\nsecret-pw\n")
    assert result.exit_code == 0, result.output
    assert "secret-pw" not in result.output
    assert "Logged in to" in result.stdout and "as kim" in result.stdout
    assert "the token expires 2026-12-31 10:00 UTC" in result.stdout
    sent = api.sent("POST", "/login")[0].body
    assert (sent["username"], sent["password"]) == ("kim", "secret-pw") and sent["token_name"].startswith("login on ")
    assert json.loads(credentials_path().read_text())["token"] == "tok-kim"
    assert api.sent("GET", "/me")[0].headers["Authorization"] == "Bearer tok-kim"


def test_login_asks_for_a_token_where_the_server_takes_no_passwords(api: FakeApi) -> None:
    api.on("GET", "/auth", {"token": True, "password": False, "directory": None})
    api.on("GET", "/me", {"name": "bob", "admin": False, "labs": [], "default_lab": None, "unix_user": None})
    runner = Nanum(None)
    result = runner.runner.invoke(runner.app, ["login", api.url], input="tok-bob\n")
    assert result.exit_code == 0, result.output
    assert "tok-bob" not in result.output and api.sent("POST", "/login") == []
