"""Server fixtures: the real app over a real database (SQLite and PostgreSQL), users with known tokens, and a
fake agent *client* that posts real heartbeats."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nanum.server.app import create_app
from nanum.server.context import ServerContext
from nanum.server.schemas import UserIn
from nanum.server.services import accounts, charging
from nanum.server.settings import ServerSettings
from nanum.store import Database
from tests.server.asgiclient import AsgiClient, serve
from tests.server.fakeagent import FakeAgent
from tests.store.databases import _pg_database, _sqlite_template, database

__all__ = ["_pg_database", "_sqlite_template", "database"]

ADMIN, ALICE, BOB = "admin-token", "alice-token", "bob-token"


@pytest.fixture
def ctx(database: Database, tmp_path: Path) -> ServerContext:
    settings = ServerSettings(home=tmp_path / "home", grace_s=5.0)
    context = ServerContext.create(settings, database)
    accounts.create_user(context, UserIn(name="admin", labs=["default"], admin=True), ADMIN)
    accounts.create_user(context, UserIn(name="alice", labs=["vision"], unix_user="alice"), ALICE)
    accounts.create_user(context, UserIn(name="bob", labs=["vision", "nlp"]), BOB)
    return context


@pytest.fixture
def client(ctx: ServerContext) -> Iterator[AsgiClient]:
    """The app with its scheduler left to the test (`tick(client)`)."""
    app = create_app(ctx, run_scheduler=False)
    with serve(app) as c:
        yield c
    app.state.scheduler.leadership.release()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def tick(client: AsgiClient) -> None:
    client.app.state.scheduler.tick()


def settle(db: Database, half_life: float) -> int:
    """What the scheduler's next tick settles: the runs not yet charged to their labs and users."""
    with db.write() as s:
        return charging.settle(s, half_life)


def submit(client: AsgiClient, token: str = ALICE, **body: object) -> dict[str, object]:
    body.setdefault("command", ["python", "train.py"])
    body.setdefault("workdir", "/tmp")
    r = client.post("/api/v1/jobs", json=body, headers=auth(token))
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def job(client: AsgiClient, job_id: object) -> dict[str, object]:
    r = client.get(f"/api/v1/jobs/{job_id}", headers=auth(ALICE))
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


@pytest.fixture
def agent(client: AsgiClient, ctx: ServerContext) -> FakeAgent:
    """Node gpu-01 with 4 simulated A100s, registered and heard from once."""
    token = accounts.add_node(ctx, "gpu-01")
    node = FakeAgent(client, "gpu-01", token, gpus=4)
    node.beat()
    return node
