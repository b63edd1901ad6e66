"""The server's monitoring: records the readings heartbeats carry, keeps the history tidy, tells people.

`Monitoring.record` runs for each heartbeat with readings (see `nanum.server.services.samples`); `run` is the
upkeep loop started with the app: every `summary_s` it gives finished jobs their efficiency summary, and every
`rollup_s` it rolls readings up into coarser buckets and prunes old ones (`nanum.server.services.history`); on
PostgreSQL it keeps the planner's statistics of a young database current (`nanum.store.planner`). Where
servers (or `nanum server --workers` processes) share a database, only the one that schedules (`leads`) does the
database's upkeep: the others would repeat it, and two summarising the same finished jobs at once could lock
their rows in opposite orders. Every server still removes old checkpoint directories under its own root.

`install` adds all of it to the app: the monitoring API under /api/v1, `/metrics`, the dashboard at `/`, and the
upkeep loop in the app's lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

from fastapi import APIRouter, FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from nanum.protocol import Sample
from nanum.server.context import ServerContext
from nanum.server.metrics import Metrics
from nanum.server.services import checkpoints, history, tokens
from nanum.server.services.notify import Notifier
from nanum.server.services.samples import Recorded, record
from nanum.store.planner import PlannerStatistics

log = logging.getLogger("nanum.server")


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

    def record(self, node_id: int, samples: list[Sample]) -> Recorded:
        """Store a heartbeat's readings and send the notices they produced. Wakes nodes and the scheduler as
        needed (a job released, GPUs taken or freed by processes outside nanum)."""
        recorded = record(self.ctx, node_id, samples, self.ctx.clock())
        self.notifier.send(recorded.notices)
        if recorded.woken:
            self.ctx.signals.wake(recorded.woken)
        if recorded.rogue_changed or recorded.woken:
            self.ctx.signals.poke()
        return recorded

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
    api = APIRouter(prefix="/api/v1")
    api.include_router(monitoring_api.router)
    app.include_router(api)

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
            try:
                yield state
            finally:
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                await asyncio.to_thread(found.close)

    app.router.lifespan_context = lifespan  # type: ignore[assignment]
