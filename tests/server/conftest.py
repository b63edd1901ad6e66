"""Server fixtures: the real app over a real database (SQLite and PostgreSQL), users with known tokens, and a
fake agent *client* that posts real heartbeats."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nanum.server import lastseen, monitoring
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


#: The modules whose writers flush every `FLUSH_S` in a server's lifespan, and that period.
_WRITERS = {monitoring: monitoring.FLUSH_S, lastseen: lastseen.FLUSH_S}


def writing_as_served(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give the apps a test makes after `client` the periodic writes a running server has (a second server whose
    writes the test waits for)."""
    for module, period in _WRITERS.items():
        monkeypatch.setattr(module, "FLUSH_S", period)


@pytest.fixture
def client(ctx: ServerContext, monkeypatch: pytest.MonkeyPatch) -> Iterator[AsgiClient]:
    """The app with its scheduler left to the test (`tick(client)`), and its periodic writes too (GPU readings,
    when nodes were heard from): a test that says "sent, not yet written" must not race a writer's second."""
    for module in _WRITERS:
        monkeypatch.setattr(module, "FLUSH_S", 3600.0)
    app = create_app(ctx, run_scheduler=False)
    with serve(app) as c:
        yield c
    app.state.scheduler.leadership.release()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def tick(client: AsgiClient) -> None:
    client.app.state.scheduler.tick()


def count_calls(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[object]:
    """Wrap `owner.name` so that each call is counted: the list returned grows by one per call."""
    calls: list[object] = []
    wrapped = getattr(owner, name)

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(args)
        return wrapped(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


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
