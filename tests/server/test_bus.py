"""The wake-ups servers sharing a PostgreSQL database send each other (`nanum.server.bus`): delivered to the
others and not back to the sender, many at once in notifications PostgreSQL accepts, a stranger's notification
on the channel ignored, and after the listening connection is cut, heard again with what was missed re-read."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import text

from nanum.server.bus import MAX_PAYLOAD, Bus, payloads
from nanum.store import Database
from tests.store.databases import create_pg_schema, drop_pg_schema, pg_schema_database

pytestmark = pytest.mark.postgres


class Heard:
    """What one server's bus delivered."""

    def __init__(self) -> None:
        self.pokes: list[bool] = []
        self.woken: list[str] = []
        self.missed = 0
        self.changed = threading.Condition()

    def poke(self, new_gpu_job: bool) -> None:
        with self.changed:
            self.pokes.append(new_gpu_job)
            self.changed.notify_all()

    def wake(self, nodes: list[str]) -> None:
        with self.changed:
            self.woken.extend(nodes)
            self.changed.notify_all()

    def miss(self) -> None:
        with self.changed:
            self.missed += 1
            self.changed.notify_all()

    def wait_for(self, done: Callable[[], bool], timeout: float = 10.0) -> bool:
        with self.changed:
            return self.changed.wait_for(done, timeout)


@pytest.fixture
def databases() -> Iterator[tuple[Database, Database]]:
    schema = create_pg_schema()
    first, second = pg_schema_database(schema), pg_schema_database(schema)
    try:
        yield first, second
    finally:
        first.dispose()
        second.dispose()
        drop_pg_schema(schema)


def started(db: Database) -> tuple[Bus, Heard]:
    heard = Heard()
    bus = Bus(db, heard.poke, heard.wake, heard.miss)
    bus.start()
    assert bus.listening.wait(10), "the bus never listened"
    return bus, heard


def test_wake_ups_and_pokes_reach_the_other_server_and_not_the_sender(databases: tuple[Database, Database]) -> None:
    (a, heard_a), (b, heard_b) = started(databases[0]), started(databases[1])
    try:
        a.wake(["gpu-01", "gpu-02"])
        a.poke(new_gpu_job=True)
        assert heard_b.wait_for(lambda: sorted(heard_b.woken) == ["gpu-01", "gpu-02"] and heard_b.pokes == [True])
        b.poke()
        assert heard_a.wait_for(lambda: heard_a.pokes == [False])
        time.sleep(0.3)
        assert heard_a.woken == [] and heard_b.pokes == [True]  # nobody hears itself
    finally:
        a.close()
        b.close()


def test_a_thousand_nodes_woken_at_once_arrive_in_notifications_postgresql_takes(
    databases: tuple[Database, Database],
) -> None:
    names = [f"node-{i:04d}-{'x' * 40}" for i in range(1000)]
    notes = payloads("me", 2, names)
    assert len(notes) > 1 and all(len(n.encode()) <= MAX_PAYLOAD for n in notes)
    (a, _), (b, heard_b) = started(databases[0]), started(databases[1])
    try:
        a.wake(names)
        assert heard_b.wait_for(lambda: len(heard_b.woken) == len(names))
        assert sorted(heard_b.woken) == names
    finally:
        a.close()
        b.close()


def test_a_strangers_notification_on_the_channel_is_ignored(databases: tuple[Database, Database]) -> None:
    (a, heard_a), (b, _) = started(databases[0]), started(databases[1])
    try:
        with databases[1].engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            for junk in ("not json", json.dumps([1, 2]), json.dumps({"poke": "lots", "wake": 3}), "\x01"):
                conn.execute(text("SELECT pg_notify(:c, :p)"), {"c": a.channel, "p": junk})
        b.wake(["gpu-07"])
        assert heard_a.wait_for(lambda: heard_a.woken == ["gpu-07"])
        assert heard_a.pokes == []
    finally:
        a.close()
        b.close()


def test_after_its_connection_is_cut_a_server_listens_again_and_rereads_what_it_missed(
    databases: tuple[Database, Database],
) -> None:
    (a, heard_a), (b, _) = started(databases[0]), started(databases[1])
    try:
        with databases[1].engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            cut = conn.execute(text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' "
                "AND pid <> pg_backend_pid() AND query LIKE :channel"), {"channel": f"%{a.channel}%"}).all()
        assert len(cut) == 2  # both servers' listening connections
        assert heard_a.wait_for(lambda: heard_a.missed == 1), "the server did not listen again"
        assert a.listening.wait(10)
        b.wake(["gpu-03"])
        assert heard_a.wait_for(lambda: heard_a.woken == ["gpu-03"])
    finally:
        a.close()
        b.close()
