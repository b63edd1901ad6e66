"""What services record is stamped by the server's clock (`ctx.clock`), not the machine's: a lab's history, and
the users and labs a bulk import creates, carry the time the clock gives."""

from __future__ import annotations

from sqlalchemy import select

from nanum.server.context import ServerContext
from nanum.store import LabRow, UserRow
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, auth

#: 2026-03-15 12:00 UTC, long before any test runs.
THEN = 1_773_576_000.0


def test_a_labs_history_and_an_imports_users_and_labs_carry_the_servers_time(
    client: AsgiClient, ctx: ServerContext
) -> None:
    ctx.clock = lambda: THEN
    people = [{"name": "kim", "unix_user": "kim", "labs": ["optics"], "role": "member", "email": None}]
    r = client.post("/api/v1/users/import", json={"users": people}, headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    with ctx.db.read() as s:
        assert s.scalar(select(UserRow.created).where(UserRow.name == "kim")) == THEN
        assert s.scalar(select(LabRow.created).where(LabRow.name == "optics")) == THEN
    r = client.request("PUT", "/api/v1/labs/vision/members/kim", json={"role": "member"}, headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    history = client.get("/api/v1/labs/vision", headers=auth(ADMIN)).json()["history"]
    assert history and history[0]["time"].startswith("2026-03-15T12:00:00"), history
