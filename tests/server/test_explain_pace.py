"""A long queue is explained (reasons, estimates, places) at most once a second, and at most a tenth of the time:
the ticks between only decide, so a queue that drains quickly is not re-explained many times a second, and one
that takes long to explain is explained less often. A short queue is explained at every tick."""

from __future__ import annotations

import time

import pytest

from nanum.server import scheduler
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import job, submit
from tests.server.fakeagent import FakeAgent


def tick_at(client: AsgiClient, now: float) -> None:
    client.app.state.scheduler.tick(now=now)


@pytest.fixture
def now() -> float:
    """The tests' clock starts at the real time: the node was heard from just now."""
    return time.time()


def test_a_long_queue_gets_its_reasons_at_most_once_a_second(
    client: AsgiClient, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch, now: float
) -> None:
    monkeypatch.setattr(scheduler, "EXPLAIN_LONG_QUEUE", 3)
    monkeypatch.setattr(scheduler, "EXPLAIN_SHARE", 1.0)  # once a second, however slow this machine's ticks
    blocker = submit(client, gpus=4)
    tick_at(client, now)
    assert job(client, blocker["id"])["state"] == "running"
    waiting = [submit(client, gpus=4) for _ in range(3)]
    tick_at(client, now + 1)  # a second since the last explanation: explained
    assert all(job(client, j["id"])["reason_code"] == "resources" for j in waiting)

    late = submit(client, gpus=4)
    tick_at(client, now + 1.5)  # four waiting, explained half a second ago: this tick only decides
    assert job(client, late["id"])["reason"] == "waiting for the scheduler"
    tick_at(client, now + 2.1)
    shown = job(client, late["id"])
    assert shown["reason_code"] == "resources", shown["reason"]
    assert "3 jobs ahead" in shown["reason"]


def test_a_queue_that_takes_long_to_explain_is_explained_less_often(
    client: AsgiClient, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch, now: float
) -> None:
    """The pause after an explaining tick is that tick's time over `EXPLAIN_SHARE` (here a thousandth, so that
    this small queue's few milliseconds stand for 100,000 jobs' second)."""
    monkeypatch.setattr(scheduler, "EXPLAIN_LONG_QUEUE", 3)
    monkeypatch.setattr(scheduler, "EXPLAIN_SHARE", 0.001)
    blocker = submit(client, gpus=4)
    tick_at(client, now)
    waiting = [submit(client, gpus=4) for _ in range(3)]
    explained = client.app.state.scheduler.tick(now=now + 1)
    assert job(client, blocker["id"])["state"] == "running"
    assert all(job(client, j["id"])["reason_code"] == "resources" for j in waiting)
    pause = max(1.0, explained.seconds / 0.001)
    assert pause > 1.5, f"an explaining tick took {explained.seconds * 1000:.2f} ms: too quick to test the share"

    late = submit(client, gpus=4)
    tick_at(client, now + 1 + pause * 0.9)  # before the pause is over: decides only
    assert job(client, late["id"])["reason"] == "waiting for the scheduler"
    tick_at(client, now + 1 + pause * 1.1)
    assert job(client, late["id"])["reason_code"] == "resources"


def test_a_short_queue_is_explained_at_every_tick(client: AsgiClient, agent: FakeAgent, now: float) -> None:
    blocker = submit(client, gpus=4)
    tick_at(client, now)
    assert job(client, blocker["id"])["state"] == "running"
    first = submit(client, gpus=4)
    tick_at(client, now + 0.1)
    second = submit(client, gpus=4)
    tick_at(client, now + 0.2)
    assert job(client, first["id"])["reason_code"] == "resources"
    assert job(client, second["id"])["reason_code"] == "resources"


def test_between_explanations_a_tick_cycles_only_when_a_job_could_start(
    client: AsgiClient, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch, now: float
) -> None:
    """A full cluster with a long queue: a tick that explains nothing and has nothing to start passes over no
    queue; once GPUs come free, the next such tick starts the first waiting job all the same."""
    monkeypatch.setattr(scheduler, "EXPLAIN_LONG_QUEUE", 3)
    monkeypatch.setattr(scheduler, "EXPLAIN_SHARE", 1.0)
    holders = [submit(client, gpus=1)["id"] for _ in range(4)]
    tick_at(client, now)
    agent.beat()
    waiting = [submit(client, gpus=1)["id"] for _ in range(5)]
    core = client.app.state.scheduler.core
    decide = core.decide
    cycles: list[int] = []

    def counted(snapshot: object) -> object:
        cycles.append(len(snapshot.pending))  # type: ignore[attr-defined]
        return decide(snapshot)  # type: ignore[arg-type]

    monkeypatch.setattr(core, "decide", counted)
    tick_at(client, now + 1)  # explains: cycles
    assert cycles == [5]
    tick_at(client, now + 1.2)  # nothing came free, nothing explained: no cycle
    tick_at(client, now + 1.4)
    assert cycles == [5]
    assert all(job(client, j)["reason_code"] == "resources" for j in waiting)  # the reasons shown stand
    agent.exit(holders[0])
    agent.beat()
    tick_at(client, now + 1.6)  # a GPU came free: cycles, and starts the first in line
    assert cycles == [5, 5]
    assert [job(client, j)["state"] for j in waiting] == ["running"] + ["pending"] * 4
