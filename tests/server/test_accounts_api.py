"""Users, labs and nodes through the API: admins create them, everyone sees who they are."""

from __future__ import annotations

from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth


def test_me_says_who_i_am(client: AsgiClient) -> None:
    me = client.get("/api/v1/me", headers=auth(BOB)).json()
    want = {"name": "bob", "admin": False, "labs": ["nlp", "vision"], "default_lab": "vision", "unix_user": None}
    assert me.items() >= want.items()


def test_an_admin_adds_a_user_whose_token_works_at_once(client: AsgiClient) -> None:
    r = client.post(
        "/api/v1/users", json={"name": "carol", "labs": ["physics"], "unix_user": "carol"}, headers=auth(ADMIN)
    )
    assert r.status_code == 201 and r.json()["name"] == "carol"
    token = r.json()["token"]
    me = client.get("/api/v1/me", headers=auth(token)).json()
    assert me["default_lab"] == "physics" and me["unix_user"] == "carol"
    assert "physics" in [lab["name"] for lab in client.get("/api/v1/labs", headers=auth(ALICE)).json()]
    again = client.post("/api/v1/users", json={"name": "carol"}, headers=auth(ADMIN))
    assert again.status_code == 409 and again.json()["detail"] == "user carol already exists"
    names = [u["name"] for u in client.get("/api/v1/users", headers=auth(ADMIN)).json()]
    assert names == ["admin", "alice", "bob", "carol"]


def test_members_may_not_manage_people_labs_or_nodes(client: AsgiClient) -> None:
    for method, path, body in (
        ("POST", "/api/v1/users", {"name": "mallory"}),
        ("GET", "/api/v1/users", None),
        ("POST", "/api/v1/labs", {"name": "mine"}),
        ("PATCH", "/api/v1/labs/vision", {"max_gpus": 100}),
        ("POST", "/api/v1/nodes", {"name": "rogue"}),
    ):
        r = client.request(method, path, json=body, headers=auth(ALICE))
        assert r.status_code == 403 and r.json()["detail"] == "only an admin may do this", path


def test_labs_are_created_listed_and_changed(client: AsgiClient) -> None:
    r = client.post(
        "/api/v1/labs",
        json={"name": "robotics", "guaranteed_gpus": 4, "max_gpus": 8, "monthly_gpu_hours": 1000},
        headers=auth(ADMIN),
    )
    assert r.status_code == 201
    want = {
        "name": "robotics",
        "guaranteed_gpus": 4,
        "max_gpus": 8,
        "max_running_jobs": None,
        "monthly_gpu_hours": 1000.0,
        "weight": 1.0,
    }
    assert r.json().items() >= want.items()
    assert client.post("/api/v1/labs", json={"name": "robotics"}, headers=auth(ADMIN)).status_code == 409
    r = client.patch("/api/v1/labs/robotics", json={"max_gpus": None, "weight": 2}, headers=auth(ADMIN))
    assert r.json()["max_gpus"] is None and r.json()["weight"] == 2.0 and r.json()["guaranteed_gpus"] == 4
    r = client.patch("/api/v1/labs/nope", json={"weight": 2}, headers=auth(ADMIN))
    assert r.status_code == 404 and "nanum lab add nope" in r.json()["detail"]
    r = client.post("/api/v1/labs", json={"name": "bad name!"}, headers=auth(ADMIN))
    assert r.status_code == 422 and r.json()["detail"].startswith("invalid name: ")


def test_a_registered_node_shows_up_once_its_agent_reports(client: AsgiClient) -> None:
    r = client.post("/api/v1/nodes", json={"name": "gpu-07"}, headers=auth(ADMIN))
    assert r.status_code == 201 and r.json()["name"] == "gpu-07" and r.json()["token"]
    assert client.post("/api/v1/nodes", json={"name": "gpu-07"}, headers=auth(ADMIN)).status_code == 409
    [node] = client.get("/api/v1/nodes", headers=auth(ALICE)).json()
    assert node["name"] == "gpu-07" and node["state"] == "down" and node["gpus"] == [] and node["last_seen"] is None
