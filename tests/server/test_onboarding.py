"""Bulk onboarding: a list of people becomes users with their labs, roles, Unix accounts and emails, and the
same list again changes nothing."""

from __future__ import annotations

from typing import Any

from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, auth

PEOPLE = [
    {"name": "kim", "unix_user": "kim", "labs": ["vision"], "role": "member", "email": "kim@uni.example"},
    {"name": "lee", "unix_user": "jlee", "labs": ["vision", "nlp"], "role": "manager", "email": None},
    {"name": "park", "unix_user": "park", "labs": ["robotics"], "role": "admin", "email": "park@uni.example"},
]


def imported(client: AsgiClient, users: list[dict[str, Any]], dry_run: bool = False) -> dict[str, Any]:
    r = client.post("/api/v1/users/import", json={"users": users, "dry_run": dry_run}, headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_an_import_creates_then_changes_nothing_the_second_time(client: AsgiClient) -> None:
    first = imported(client, PEOPLE)
    assert [c["name"] for c in first["created"]] == ["kim", "lee", "park"]
    assert first["created"][1]["changes"]["labs"] == [[], ["nlp (manager)", "vision (manager)"]]
    kim_token = first["created"][0]["token"]
    me = client.get("/api/v1/me", headers=auth(kim_token)).json()
    assert (me["name"], me["unix_user"], me["labs"], me["default_lab"]) == ("kim", "kim", ["vision"], "vision")
    assert client.get("/api/v1/me", headers=auth(first["created"][2]["token"])).json()["admin"] is True
    members = client.get("/api/v1/labs/nlp/members", headers=auth(first["created"][1]["token"]))
    assert members.status_code == 200  # lee manages nlp
    again = imported(client, PEOPLE)
    assert (again["created"], again["changed"], again["unchanged"]) == ([], [], ["kim", "lee", "park"])


def test_an_import_brings_existing_users_to_the_list(client: AsgiClient) -> None:
    imported(client, PEOPLE)
    moved = [{**PEOPLE[0], "labs": ["nlp"], "email": "kim@lab.example"}, {**PEOPLE[1], "role": "member"}]
    preview = imported(client, moved, dry_run=True)
    assert [c["name"] for c in preview["changed"]] == ["kim", "lee"] and preview["dry_run"]
    assert client.get("/api/v1/labs/vision/members", headers=auth(ADMIN)).json()[0]["user"] == "alice"
    assert "kim" in [m["user"] for m in client.get("/api/v1/labs/vision/members", headers=auth(ADMIN)).json()]
    done = imported(client, moved)
    kim = done["changed"][0]
    assert kim["changes"] == {"email": ["kim@uni.example", "kim@lab.example"], "labs": [["vision"], ["nlp"]]}
    assert done["changed"][1]["changes"] == {"labs": [["nlp (manager)", "vision (manager)"], ["nlp", "vision"]]}
    assert "kim" not in [m["user"] for m in client.get("/api/v1/labs/vision/members", headers=auth(ADMIN)).json()]
    users = {u["name"]: u for u in client.get("/api/v1/users", headers=auth(ADMIN)).json()}
    assert users["kim"]["default_lab"] == "nlp"
    assert users["alice"]["labs"] == ["vision"]  # not listed: left alone


def test_an_import_is_for_admins_and_names_each_user_once(client: AsgiClient) -> None:
    r = client.post("/api/v1/users/import", json={"users": PEOPLE}, headers=auth(ALICE))
    assert r.status_code == 403
    r = client.post("/api/v1/users/import", json={"users": [PEOPLE[0], PEOPLE[0]]}, headers=auth(ADMIN))
    assert r.status_code == 400 and r.json()["detail"] == "user kim is listed more than once; keep one line per user"
    assert "kim" not in [u["name"] for u in client.get("/api/v1/users", headers=auth(ADMIN)).json()]
