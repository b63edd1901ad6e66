"""One thread's transactions go first (the scheduling tick's), on SQLite and PostgreSQL: while it runs, another
thread's new transaction waits for it to end; a thread already in a transaction, code on an event loop and a wait
past `Precedence.MAX_WAIT_S` are never held up, so nothing can wedge on it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from nanum.store import Database, EventRow
from nanum.store.db import Precedence
from tests.store.test_schema import _seed


def _event(database: Database, job_id: int, kind: str) -> None:
    with database.write() as s:
        s.add(EventRow(job_id=job_id, time=0.0, kind=kind))


def _kinds(database: Database) -> list[str]:
    with database.read() as s:
        return [e.kind for e in s.query(EventRow).order_by(EventRow.id)]


def _in_thread(work: object) -> threading.Thread:
    thread = threading.Thread(target=work, daemon=True)  # type: ignore[arg-type]
    thread.start()
    return thread


def _finishes_while_first(database: Database, work: object) -> bool:
    """Whether `work`, run in another thread while this one goes first, ends before this one is done."""
    with database.precedence.first():
        other = _in_thread(work)
        other.join(10)
        return not other.is_alive()


def test_another_threads_transaction_waits_until_the_one_going_first_is_done(database: Database) -> None:
    _, job_id, _, _ = _seed(database)
    with database.precedence.first():
        other = _in_thread(lambda: _event(database, job_id, "request"))
        other.join(0.3)
        assert other.is_alive(), "a request wrote while the tick went first"
        _event(database, job_id, "tick")
    other.join(10)
    assert _kinds(database) == ["tick", "request"]


def test_a_thread_already_in_a_transaction_goes_on_while_another_goes_first(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It may hold row locks the one going first needs: waiting would deadlock the two."""
    monkeypatch.setattr(Precedence, "MAX_WAIT_S", 60.0)
    _, job_id, _, _ = _seed(database)
    inside, go = threading.Event(), threading.Event()

    def request() -> None:
        with database.write() as s:
            s.add(EventRow(job_id=job_id, time=0.0, kind="request"))
            inside.set()
            go.wait(10)
            with database.read() as r:  # a second session of the same thread
                r.query(EventRow).count()

    other = _in_thread(request)
    assert inside.wait(10)
    with database.precedence.first():
        go.set()
        other.join(10)
        assert not other.is_alive(), "a thread inside a transaction waited for the tick"
    assert _kinds(database) == ["request"]


def test_code_on_an_event_loop_never_waits(database: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Waiting would stop every request the loop serves, the tick's own wake-ups among them."""
    monkeypatch.setattr(Precedence, "MAX_WAIT_S", 60.0)
    _, job_id, _, _ = _seed(database)

    async def on_loop() -> None:
        _event(database, job_id, "loop")

    assert _finishes_while_first(database, lambda: asyncio.run(on_loop())), "code on an event loop waited for the tick"
    assert _kinds(database) == ["loop"]


def test_no_transaction_waits_longer_than_the_cap(database: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Precedence, "MAX_WAIT_S", 0.2)
    _, job_id, _, _ = _seed(database)
    assert _finishes_while_first(database, lambda: _event(database, job_id, "request")), "a request waited past the cap"
    assert _kinds(database) == ["request"]
