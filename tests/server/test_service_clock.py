"""What services record is stamped by the server's clock (`ctx.clock`), not the machine's: a lab's history, and
the users and labs a bulk import creates, carry the time the clock gives."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

import nanum.server.services
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


def test_no_service_reads_the_machines_clock() -> None:
    """Services take the time from `ctx.clock` (or a `now` their caller got from it), so tests and replays set it."""
    services = Path(nanum.server.services.__file__).parent
    found = [f"{path.name}:{n}" for path in sorted(services.glob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if "time.time()" in line]
    assert found == [], f"time.time() in services: {found}"
