"""The FastAPI application: routes under /api/v1, error handlers, and in its lifespan the scheduler loop, the
batched writes of when nodes were last heard from (`nanum.server.lastseen`) and, on PostgreSQL, the wake-ups
shared with other servers on the same database (`nanum.server.bus`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import anyio.to_thread
from fastapi import FastAPI

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
#: Threads that run request handlers' blocking work (database transactions). Few: the handlers share one
#: interpreter lock with the scheduling tick, and with anyio's default of 40, at 300 nodes, heartbeats in forty
#: threads took turns with the tick (cycles of 2.4 s at p99 against 1.0 s with 10, and 25 % fewer heartbeats
#: handled). A held heartbeat waits without a thread. Heartbeats share these threads with users' requests on
#: purpose: with ten threads of their own for heartbeats, 1,000 nodes took all 100 submissions a second (not 45)
#: at a third of the latency, but that let the whole load through to a fleet this server cannot yet carry: jobs
#: started late and heartbeats timed out. Shared, submissions wait instead, and the fleet stays served. Measured
#: again with most heartbeats answered without a thread (`services.agent.recall`): 5 threads of their own for
#: heartbeats took every submission at 1,000 nodes on 4,000 jobs (p99 242-321 ms against 534-653 shared), but at
#: the full 20,000, 629 heartbeats timed out and 2,606 jobs had not started a minute after the last submission; 10
#: of their own and 4 for people: 163 timed out, start wait p99 4.2 s. Shared: none, every job started, p99 0.65 s.
#: Shared, but people's requests first (heartbeats in a line of their own, 4 of them always in the shared one):
#: the same. On 4,000 jobs every submission was taken (p99 287 ms); at the full 20,000, 626 heartbeats timed out
#: and 5,173 jobs had not started. With heartbeats joining the shared line after a second of waiting: 65.7
#: submissions/s taken, p99 2.0 s, against 63.5/s and 2.2 s in arrival order, as here, the same hour. Which
#: request goes first only chooses who waits: at 1,000 nodes one process is full.
WORKER_THREADS = 10


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
    errors.install(app)
    # Routes are matched in this order, one pattern after another: the agents' heartbeats, most of a fleet's
    # requests, come first (matching them after every other route was 15 % of a quiet heartbeat's CPU). Each
    # module's routes are included in the app itself, not through one router of them all: FastAPI walks an
    # included router's routes, and those it includes, on every request that reaches it (at 1,000 nodes, 4 % of a
    # serving process's CPU went to matching a heartbeat through the nested routers).
    for module in (agent, health, jobs, nodes, accounts, identity, members, sharing, reports, sessions,
                   environment_routes):
        app.include_router(module.router, prefix=API_PREFIX)
    app.include_router(sessions.proxy_router)
    apidocs.install(app)
    apidocs.publish_models(app, [Heartbeat])  # read by its route itself (`nanum.server.api.agent`)
    monitoring.install(app, ctx, run_upkeep=run_scheduler)
    return app
