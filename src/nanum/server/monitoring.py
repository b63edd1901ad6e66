"""The server's monitoring: records the readings heartbeats carry, keeps the history tidy, tells people.

`Monitoring.receive` keeps the readings each heartbeat brings (`Readings`), and `write_readings` writes them about
once a second (`FLUSH_S`), all nodes' in one transaction (see `nanum.server.services.samples`): at 1,000 busy
nodes, one write of its own per heartbeat with readings (about 200 a second) took more of the server than
anything else. What this costs: what the readings cause (a job's utilisation shown, an idle job flagged or
released, a GPU used outside nanum kept out of scheduling) happens up to a second later, the release reaching the
node as any stop does (its held heartbeat is woken); and a server that crashes loses the readings of its last
second, which agents count as delivered. A server that stops writes them first.

`run` is the upkeep loop started with the app: every `summary_s` it gives finished jobs their efficiency summary,
and every `rollup_s` it rolls readings up into coarser buckets and prunes old ones (`nanum.server.services.history`); on
PostgreSQL it keeps the planner's statistics of a young database current (`nanum.store.planner`). Where
servers (or `nanum server --workers` processes) share a database, only the one that schedules (`leads`) does the
database's upkeep: the others would repeat it, and two summarising the same finished jobs at once could lock
their rows in opposite orders. Every server still removes old checkpoint directories under its own root.

`install` adds all of it to the app: the monitoring API under /api/v1, `/metrics`, the dashboard at `/`, and the
upkeep loop and the readings' writer in the app's lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from nanum.protocol import Sample
from nanum.server.context import ServerContext
from nanum.server.metrics import Metrics
from nanum.server.periodic import flush_every
from nanum.server.services import checkpoints, history, tokens
from nanum.server.services.notify import Notifier
from nanum.server.services.samples import Recorded, record
from nanum.store.db import retry_deadlocks
from nanum.store.planner import PlannerStatistics

log = logging.getLogger("nanum.server")

#: How often the readings heartbeats brought are written (seconds).
FLUSH_S = 1.0
#: The most readings of one node kept for the next write (the newest), should writes fail for a while: as many as
#: an agent keeps while the server cannot be reached (`nanum.agent.monitor.Monitor`), ten minutes of them at its
#: default `--sample-interval`.
MAX_WAITING = 120
#: The most nodes whose readings one transaction writes: on SQLite it holds the only write lock throughout (about
#: 1 ms a node of 8 busy GPUs). At 1,000 nodes on PostgreSQL, 20 took more server CPU and fewer submissions than
#: 100, with no better scheduling cycle (`benchmarks/scale.py`, alternating pairs).
BATCH_NODES = 100


class Readings:
    """Node id → the readings its heartbeats brought since the last write. Thread-safe."""

    def __init__(self) -> None:
        self._waiting: dict[int, list[Sample]] = {}
        self._lock = threading.Lock()

    def add(self, node_id: int, samples: list[Sample]) -> None:
        with self._lock:
            waiting = self._waiting.setdefault(node_id, [])
            waiting += samples
            del waiting[:-MAX_WAITING]

    def take(self) -> dict[int, list[Sample]]:
        """All that waits; it waits no more."""
        with self._lock:
            taken, self._waiting = self._waiting, {}
        return taken

    def put_back(self, taken: dict[int, list[Sample]]) -> None:
        """Readings `take` gave that could not be written: they wait again, before any that came since."""
        with self._lock:
            for node_id, samples in taken.items():
                waiting = self._waiting[node_id] = samples + self._waiting.get(node_id, [])
                del waiting[:-MAX_WAITING]


class Monitoring:
    def __init__(
        self,
        ctx: ServerContext,
        retention: history.Retention | None = None,
        summary_s: float = 2.0,
        rollup_s: float = 60.0,
        leads: Callable[[], bool] = lambda: True,
    ) -> None:
        """`leads`: whether this server schedules now (it then also keeps the database tidy)."""
        self.ctx = ctx
        self.leads = leads
        self.retention = retention or history.Retention()
        self.summary_s, self.rollup_s = summary_s, rollup_s
        self.notifier = Notifier(ctx)
        self.statistics = PlannerStatistics(ctx.db)
        self.readings = Readings()
        self._flushing = threading.Lock()  # one write of the readings at a time

    def receive(self, node_id: int, samples: list[Sample]) -> None:
        """Keep a heartbeat's readings for the next `flush`."""
        self.readings.add(node_id, samples)

    def flush(self) -> int:
        """Write the readings that wait, `BATCH_NODES` nodes' to a transaction, and send the notices they
        produced; wake nodes and the scheduler as needed (a job released, GPUs taken or freed by processes outside
        nanum). Returns how many nodes' readings it took (a node removed meanwhile has its dropped). Should the
        database refuse a batch, each node's are written alone: those it refuses again are dropped (and logged),
        so one bad reading cannot hold back the rest; if it refuses them all, they wait for the next flush and the
        error is raised."""
        with self._flushing:
            taken = list(self.readings.take().items())
            for first in range(0, len(taken), BATCH_NODES):
                batch = dict(taken[first:first + BATCH_NODES])
                try:
                    recorded = retry_deadlocks(lambda: record(self.ctx, batch, self.ctx.clock()))  # noqa: B023
                except Exception:
                    recorded = self._one_by_one(batch, dict(taken[first + BATCH_NODES:]))
                self.notifier.send(recorded.notices)
                if recorded.woken:
                    self.ctx.signals.wake(recorded.woken)
                if recorded.rogue_changed or recorded.woken:
                    self.ctx.signals.poke()
            return len(taken)

    def _one_by_one(self, batch: dict[int, list[Sample]], rest: dict[int, list[Sample]]) -> Recorded:
        """Write each node's readings of a `batch` the database refused alone (see `flush`); `rest`: the batches
        not yet written, which wait again should it refuse every node."""
        recorded, refused = Recorded(), {}
        error: Exception | None = None
        for node_id, samples in batch.items():
            try:
                one = retry_deadlocks(lambda: record(self.ctx, {node_id: samples}, self.ctx.clock()))  # noqa: B023
            except Exception as exc:
                refused[node_id], error = samples, exc
                continue
            recorded.notices += one.notices
            recorded.woken |= one.woken
            recorded.rogue_changed |= one.rogue_changed
        if error is not None and len(refused) == len(batch):
            self.readings.put_back({**refused, **rest})
            raise error
        for node_id, samples in refused.items():
            log.warning("dropped %d GPU readings of node id %d: the database refused them (%s)",
                        len(samples), node_id, error)
        return recorded

    async def write_readings(self) -> None:
        """Flush every `FLUSH_S` until cancelled, then once more (a server stopping writes what it was sent)."""
        await flush_every(FLUSH_S, self.flush, "GPU readings")

    def maintain(self, now: float | None = None, *, database: bool = True) -> dict[str, int]:
        """Roll up and prune readings and purge API tokens a day past their expiry (`database`); remove checkpoint
        directories kept past their retention."""
        now = self.ctx.clock() if now is None else now
        done = history.maintain(self.ctx, now, self.retention) if database else {}
        done["checkpoints"] = len(checkpoints.prune(self.ctx, now))
        if database:
            done["tokens"] = tokens.purge_expired(self.ctx, now)
        return done

    async def run(self) -> None:
        """Upkeep until cancelled."""
        next_rollup = 0.0
        while True:
            try:
                if time.monotonic() >= next_rollup:
                    next_rollup = time.monotonic() + self.rollup_s
                    await asyncio.to_thread(self.maintain, database=self.leads())
                elif self.leads():
                    await asyncio.to_thread(history.summarise_finished, self.ctx)
                    await asyncio.to_thread(self.statistics.refresh)
            except Exception:
                log.exception("monitoring upkeep failed; trying again")
            await asyncio.sleep(self.summary_s)

    def close(self) -> None:
        self.notifier.close()


def install(app: FastAPI, ctx: ServerContext, *, run_upkeep: bool = True) -> Monitoring:
    """Add monitoring, metrics and the dashboard to `app` (see the module docstring)."""
    from nanum.server import web
    from nanum.server.api import monitoring as monitoring_api

    found = Monitoring(ctx, leads=lambda: app.state.scheduler.leading)
    metrics = Metrics(ctx)
    app.state.monitoring, app.state.metrics = found, metrics
    app.state.scheduler.on_tick = lambda result: metrics.observe_cycle(result.seconds)
    app.include_router(monitoring_api.router, prefix="/api/v1")

    @app.get("/metrics", include_in_schema=False)
    def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    web.install(app)
    _wrap_lifespan(app, found, run_upkeep)
    return found


def _wrap_lifespan(app: FastAPI, found: Monitoring, run_upkeep: bool) -> None:
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: FastAPI) -> AsyncIterator[object]:
        async with inner(a) as state:
            task = asyncio.create_task(found.run(), name="nanum-monitoring") if run_upkeep else None
            writer = asyncio.create_task(found.write_readings(), name="nanum-readings")
            try:
                yield state
            finally:
                for running in (task, writer):
                    if running is not None:
                        running.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await running
                await asyncio.to_thread(found.close)

    app.router.lifespan_context = lifespan  # type: ignore[assignment]
