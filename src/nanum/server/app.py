"""The FastAPI application: routes under /api/v1, error handlers, and in its lifespan the scheduler loop, the
batched writes of when nodes were last heard from (`nanum.server.lastseen`) and, on PostgreSQL, the wake-ups
shared with other servers on the same database (`nanum.server.bus`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import anyio
import anyio.to_thread
from fastapi import APIRouter, FastAPI

from nanum import __version__
from nanum.protocol import Heartbeat
from nanum.server import apidocs, errors, monitoring
from nanum.server.api import accounts, agent, health, identity, jobs, members, nodes, reports, sessions, sharing
from nanum.server.api import environments as environment_routes
from nanum.server.api.rendering import SafeJSONResponse
from nanum.server.bus import Bus
from nanum.server.context import ServerContext
from nanum.server.guard import RequestGuard
from nanum.server.scheduler import Scheduler

API_PREFIX = "/api/v1"
#: Threads that run people's requests' blocking work (database transactions). Few: the handlers share one
#: interpreter lock with the scheduling tick, and with anyio's default of 40, at 300 nodes, heartbeats in forty
#: threads took turns with the tick (cycles of 2.4 s at p99 against 1.0 s with 10, and 25 % fewer heartbeats
#: handled). A held heartbeat waits without a thread.
WORKER_THREADS = 10
#: Threads kept for the agents' heartbeats, apart from people's requests: a fleet's heartbeats no longer queue
#: a submission behind them. Fewer than `WORKER_THREADS`: fewer threads take turns on the interpreter lock, and
#: each heartbeat's turn is shorter. Most heartbeats need none (`services.agent.recall`). At 1,000 nodes and 100
#: submissions a second (benchmarks/scale.py, 4,000 jobs, one 2-core machine), sharing 10 threads accepted
#: 82-86 submissions a second at a p99 of 534-653 ms; with 5 of their own, all 100 at 242-321 ms, jobs started
#: as soon (start wait p99 0.56-0.69 s against 0.59-0.68 s), no heartbeat failed, and the server took 16 % less
#: CPU. With 3, heartbeats queued past their timeout.
AGENT_THREADS = 5


def create_app(ctx: ServerContext, *, run_scheduler: bool = True, may_lead: bool = True) -> FastAPI:
    """The application over `ctx`. `run_scheduler=False` leaves ticking to the caller (`app.state.scheduler`);
    `may_lead=False` makes a server that never schedules (`Scheduler.may_lead`)."""
    scheduler = Scheduler(ctx, may_lead=may_lead)
    ctx.signals.on_poke = scheduler.poke

    def missed() -> None:
        """Back on the other servers' channel: what changed meanwhile is read again."""
        ctx.signals.wake_all()
        ctx.signals.poke_local()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        signals = ctx.signals
        signals.bind(asyncio.get_running_loop())
        anyio.to_thread.current_default_thread_limiter().total_tokens = WORKER_THREADS
        if ctx.db.is_postgres:
            signals.bus = Bus(ctx.db, signals.poke_local, signals.wake_local, on_missed=missed)
            signals.bus.start()
        task = asyncio.create_task(scheduler.run(), name="nanum-scheduler") if run_scheduler else None
        writer = asyncio.create_task(ctx.last_seen.run(ctx.db), name="nanum-last-seen")
        try:
            yield
        finally:
            signals.close()
            bus, signals.bus = signals.bus, None
            if bus is not None:
                await asyncio.to_thread(bus.close)
            for running in (task, writer):
                if running is not None:
                    running.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await running

    app = FastAPI(
        title="nanum",
        version=__version__,
        description="One queue for your GPU servers. See docs/api.md.",
        lifespan=lifespan,
        openapi_url="/openapi.json",
        docs_url=None,  # nanum.server.apidocs serves /docs without a CDN
        redoc_url=None,
        default_response_class=SafeJSONResponse,
    )
    app.add_middleware(RequestGuard)
    app.state.ctx = ctx
    app.state.scheduler = scheduler
    app.state.agent_threads = anyio.CapacityLimiter(AGENT_THREADS)
    errors.install(app)
    api = APIRouter(prefix=API_PREFIX)
    # Routes are matched in this order, one pattern after another: the agents' heartbeats, most of a fleet's
    # requests, come first (matching them after every other route was 15 % of a quiet heartbeat's CPU).
    for module in (agent, health, jobs, nodes, accounts, identity, members, sharing, reports, sessions):
        api.include_router(module.router)
    api.include_router(environment_routes.router)
    app.include_router(api)
    app.include_router(sessions.proxy_router)
    apidocs.install(app)
    apidocs.publish_models(app, [Heartbeat])  # read by its route itself (`nanum.server.api.agent`)
    monitoring.install(app, ctx, run_upkeep=run_scheduler)
    return app
