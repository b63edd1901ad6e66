"""Two servers on one PostgreSQL database: only one schedules at a time, no GPU is ever handed out twice, and a
job submitted to either starts at once on a node whose heartbeat either holds (`nanum.server.bus`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select, text

from nanum.server.app import create_app
from nanum.server.context import ServerContext
from nanum.server.schemas import UserIn
from nanum.server.services import accounts, checkpoints, history
from nanum.server.settings import ServerSettings
from nanum.store import EventRow, JobRow, upgrade
from nanum.store.db import Precedence
from tests.server.asgiclient import serve
from tests.server.conftest import ALICE, job, submit
from tests.server.fakeagent import FakeAgent
from tests.store.databases import create_pg_schema, drop_pg_schema, pg_schema_database

pytestmark = pytest.mark.postgres


@pytest.fixture
def pair(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[ServerContext, ServerContext]]:
    """Two servers' contexts on one schema; `@pytest.mark.parametrize("pair", [SECONDS], indirect=True)` sets
    their timer tick."""
    schema = create_pg_schema()
    first, second = pg_schema_database(schema), pg_schema_database(schema)
    try:
        upgrade(first)
        settings = ServerSettings(home=tmp_path, tick_interval_s=getattr(request, "param", 1.0))
        a, b = ServerContext.create(settings, first), ServerContext.create(settings, second)
        accounts.create_user(a, UserIn(name="alice", labs=["vision"]), ALICE)
        yield a, b
    finally:
        first.dispose()
        second.dispose()
        drop_pg_schema(schema)


def test_only_one_server_schedules_and_the_other_takes_over(pair: tuple[ServerContext, ServerContext]) -> None:
    a, b = (create_app(ctx, run_scheduler=False).state.scheduler for ctx in pair)
    try:
        assert a.tick() is not None
        assert b.tick() is None  # a holds the leadership
        a.leadership.release()  # a stops
        assert b.tick() is not None
        assert a.tick() is None
    finally:
        a.leadership.release()
        b.leadership.release()


def test_a_leader_whose_database_connection_was_cut_gives_up_without_an_error(
    pair: tuple[ServerContext, ServerContext],
) -> None:
    a, b = (create_app(ctx, run_scheduler=False).state.scheduler for ctx in pair)
    try:
        assert a.tick() is not None
        leader = a.leadership._conn.execute(text("SELECT pg_backend_pid()")).scalar_one()  # type: ignore[union-attr]
        with pair[1].db.engine.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": leader}).scalar_one()
            conn.commit()
            # It only asks the backend to end: its lock goes when it has (a moment later on a busy machine).
            deadline = time.monotonic() + 10
            while conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"),
                               {"pid": leader}).scalar_one() and time.monotonic() < deadline:
                conn.commit()
                time.sleep(0.01)
        assert b.tick() is not None  # the lock went with the connection
        assert a.tick() is None  # a finds its connection gone, gives up, and is not the leader
    finally:
        a.leadership.release()
        b.leadership.release()


def test_a_server_that_does_not_schedule_never_holds_up_its_requests(
    pair: tuple[ServerContext, ServerContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the scheduling server's tick goes first (`Database.precedence`); the other's finds out that it does not
    schedule while its requests go on."""
    monkeypatch.setattr(Precedence, "MAX_WAIT_S", 60.0)
    a, b = (create_app(ctx, run_scheduler=False).state.scheduler for ctx in pair)
    held = b.leadership.held
    answered: list[bool] = []

    def asking() -> bool:
        def request() -> None:
            with pair[1].db.read() as s:
                s.scalar(select(func.count(JobRow.id)))

        other = threading.Thread(target=request, daemon=True)
        other.start()
        other.join(10)
        answered.append(not other.is_alive())
        return held()

    monkeypatch.setattr(b.leadership, "held", asking)
    try:
        assert a.tick() is not None
        assert b.tick() is None
        assert answered == [True], "a request waited for a server that does not schedule"
    finally:
        a.leadership.release()
        b.leadership.release()


def test_a_serving_worker_never_schedules_even_alone_and_the_scheduling_one_starts_its_jobs(
    pair: tuple[ServerContext, ServerContext],
) -> None:
    """`nanum server --workers`: the processes that serve requests never take the leadership, so none of their
    requests waits for a tick; the one process that schedules starts what they took."""
    serving_ctx, scheduling_ctx = pair
    serving = create_app(serving_ctx, run_scheduler=False, may_lead=False)
    scheduling = create_app(scheduling_ctx, run_scheduler=False).state.scheduler
    with serve(serving) as client:
        agent = FakeAgent(client, "gpu-01", accounts.add_node(serving_ctx, "gpu-01"), gpus=2)
        agent.beat()
        job_id = submit(client, gpus=1)["id"]
        try:
            assert serving.state.scheduler.tick() is None  # no other server holds the leadership, and yet
            assert job(client, job_id)["state"] == "pending"
            assert scheduling.tick() is not None  # the serving worker took no lock
            assert job(client, job_id)["state"] == "running"
        finally:
            scheduling.leadership.release()
            serving.state.scheduler.leadership.release()


def test_two_busy_servers_never_start_a_job_twice(pair: tuple[ServerContext, ServerContext]) -> None:
    ctx_a, ctx_b = pair
    app_a, app_b = create_app(ctx_a, run_scheduler=False), create_app(ctx_b, run_scheduler=False)
    with serve(app_a) as client_a, serve(app_b) as client_b:
        agent = FakeAgent(client_a, "gpu-01", accounts.add_node(ctx_a, "gpu-01"), gpus=8)
        agent.beat()
        ids = [submit(client_a if i % 2 else client_b, gpus=1 + i % 3)["id"] for i in range(40)]
        stop = threading.Event()

        def keep_ticking(app: object) -> None:
            while not stop.is_set():
                app.state.scheduler.tick()  # type: ignore[attr-defined]

        threads = [threading.Thread(target=keep_ticking, args=(app,)) for app in (app_a, app_b)]
        for t in threads:
            t.start()
        try:
            for _ in range(200):
                agent.beat()
                held = agent.held_gpus()
                flat = [g for gpus in held.values() for g in gpus]
                assert len(flat) == len(set(flat)), held
                for job_id in list(held)[:2]:
                    agent.exit(job_id)
                agent.beat()
                with ctx_a.db.read() as s:
                    if s.scalar(select(func.count()).where(JobRow.state != "completed")) == 0:
                        break
        finally:
            stop.set()
            for t in threads:
                t.join()
            for app in (app_a, app_b):
                app.state.scheduler.leadership.release()
    with ctx_a.db.read() as s:
        states = set(s.scalars(select(JobRow.state)))
        starts = s.scalar(select(func.count()).where(EventRow.kind == "started"))
        requeued = s.scalar(select(func.count()).where(EventRow.kind == "requeued"))  # preempted, started again
    assert states == {"completed"} and starts == len(ids) + requeued


@pytest.mark.parametrize("pair", [60.0], indirect=True)  # no timer tick within the test: only pokes start jobs
def test_a_job_submitted_to_the_server_that_does_not_schedule_reaches_the_heartbeat_it_holds_at_once(
    pair: tuple[ServerContext, ServerContext],
) -> None:
    ctx_a, ctx_b = pair
    app_a, app_b = create_app(ctx_a), create_app(ctx_b)
    with serve(app_a), serve(app_b) as client_b:
        deadline = time.monotonic() + 10
        while app_a.state.scheduler.last is None and time.monotonic() < deadline:
            ctx_a.signals.poke_local()  # a ticks first, and so schedules (a poke before its loop runs is lost)
            time.sleep(0.02)
        assert app_a.state.scheduler.last is not None, "the first server never took the leadership"
        agent = FakeAgent(client_b, "gpu-01", accounts.add_node(ctx_b, "gpu-01"))
        agent.beat()
        replies: list[list[int]] = []
        held = threading.Thread(target=lambda: replies.append([d.job_id for d in agent.beat(wait_s=20).desired]))
        held.start()
        time.sleep(0.3)  # b holds the heartbeat now
        began = time.monotonic()
        job_id = submit(client_b, gpus=1)["id"]  # to b, which does not schedule
        held.join(timeout=15)
        took = time.monotonic() - began
    assert replies == [[job_id]]
    assert took < 2.0, f"the job reached its node {took:.2f} s after it was submitted"


def test_the_server_that_does_not_schedule_shows_the_same_predictions(
    pair: tuple[ServerContext, ServerContext],
) -> None:
    ctx_a, ctx_b = pair
    app_a, app_b = create_app(ctx_a, run_scheduler=False), create_app(ctx_b, run_scheduler=False)
    a, b = app_a.state.scheduler, app_b.state.scheduler
    with serve(app_a) as client_a, serve(app_b) as client_b:
        try:
            agent = FakeAgent(client_a, "gpu-01", accounts.add_node(ctx_a, "gpu-01"), gpus=1)
            agent.beat()
            for _ in range(2):  # two finished runs of alice's "train"
                done = submit(client_a, name="train", gpus=1, time_limit_s=3600)
                a.tick()
                agent.beat()
                agent.exit(int(done["id"]))  # type: ignore[call-overload]
                agent.beat()
            running = submit(client_a, name="train", gpus=1, time_limit_s=3600)
            waiting = submit(client_b, name="train", gpus=1, time_limit_s=3600)
            assert a.tick() is not None
            assert b.tick() is None  # b does not schedule, but reads what a predicts from
            for job_id in (running["id"], waiting["id"]):
                on_a, on_b = (job(c, job_id) for c in (client_a, client_b))
                assert on_b["prediction_basis"] == on_a["prediction_basis"] == (
                    "mean of the last 2 finished jobs of alice named train")
                assert on_b["predicted_runtime_s"] == on_a["predicted_runtime_s"] is not None
        finally:
            a.leadership.release()
            b.leadership.release()


def test_only_the_server_that_schedules_keeps_the_database_tidy(
    pair: tuple[ServerContext, ServerContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finished jobs' summaries, the readings' roll-ups and the expired tokens' purge are the database's, done
    once by the server that schedules: the other's upkeep would repeat them (and could lock the same rows in
    another order). Its checkpoint directories, its own disk's, it still prunes."""
    summarised: list[ServerContext] = []
    maintained: list[tuple[ServerContext, str]] = []
    monkeypatch.setattr(history, "summarise_finished", lambda ctx, limit=200: summarised.append(ctx) or 0)
    monkeypatch.setattr(history, "maintain", lambda ctx, now, retention: maintained.append((ctx, "db")) or {})
    monkeypatch.setattr(checkpoints, "prune", lambda ctx, now: maintained.append((ctx, "checkpoints")) or [])
    ctx_a, ctx_b = pair
    app_a, app_b = create_app(ctx_a), create_app(ctx_b)
    for app in (app_a, app_b):
        app.state.monitoring.summary_s = 0.05
        app.state.monitoring.rollup_s = 0.2
    with serve(app_a), serve(app_b):
        deadline = time.monotonic() + 10
        while not summarised.count(ctx_a) >= 3 and time.monotonic() < deadline:
            ctx_a.signals.poke_local()  # a ticks first, and so schedules
            time.sleep(0.05)
        time.sleep(0.5)
    assert app_a.state.scheduler.leading and not app_b.state.scheduler.leading
    assert summarised.count(ctx_a) >= 3 and ctx_b not in summarised
    assert (ctx_a, "db") in maintained and (ctx_b, "db") not in maintained
    assert (ctx_b, "checkpoints") in maintained
