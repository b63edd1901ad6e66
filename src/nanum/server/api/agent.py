"""The agent endpoint: one heartbeat in, the node's desired jobs out, held open while nothing changes.

Readings the heartbeat carries are kept for the next batched write (`nanum.server.monitoring`): recording them
is no part of the reply.

A heartbeat that reports jobs' ends, while jobs wait to start and this server schedules, is answered once the tick
it asked for has run (at most `NEXT_TICK_WAIT_S`), with the jobs that tick started on the node: the node starts
them on the GPUs it just freed without another round trip. Answered at once, its reply would name none of them,
and a node whose jobs end faster than it hears of new ones would learn of each job one end late.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from nanum.protocol import Heartbeat, HeartbeatReply
from nanum.server.api import rendering
from nanum.server.auth import current_node, get_context
from nanum.server.callers import NodeCaller
from nanum.server.context import ServerContext
from nanum.server.services import agent
from nanum.store.db import retry_deadlocks

router = APIRouter(prefix="/agent", tags=["agent"])
log = logging.getLogger("nanum.server")

#: How long a heartbeat that reported ends waits for the tick it asked for (see the module docstring). A tick
#: takes milliseconds; one that follows a long tick may wait its pace (`scheduler.PACE_MAX_S`), and the reply
#: then goes without the new jobs, which reach the node with its next heartbeat.
NEXT_TICK_WAIT_S = 0.25

async def _read_heartbeat(request: Request) -> Heartbeat:
    """The heartbeat in the request's body, read by `Heartbeat.from_json` rather than by FastAPI: a fleet's
    server reads a few hundred a second, and that takes a third of the time. A body that is not one is refused
    (422) as FastAPI refuses any other."""
    try:
        return Heartbeat.from_json(await request.body())
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None


#: The body and its refusal as the published schema describes them (`nanum.server.apidocs.publish_models`
#: publishes `Heartbeat`).
HEARTBEAT_BODY = {
    "requestBody": {"required": True, "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/Heartbeat"}}}},
    "responses": {"422": {"description": "Validation Error", "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}}}},
}


@router.post("/heartbeat", openapi_extra=HEARTBEAT_BODY, response_model=HeartbeatReply)
async def heartbeat(request: Request) -> Response:
    """Record the node's report and reply with the jobs it should run. With `wait_s` > 0 and nothing to change,
    the reply is held until the node's jobs change or `wait_s` passes."""
    # The node's token, then its body, read here rather than as FastAPI dependencies, and the reply rendered once by
    # pydantic-core (`rendering.json`; the published schema is unchanged): a fleet's server answers a few hundred
    # heartbeats a second, most of them from memory, and FastAPI's own handling of dependencies and of a returned
    # model cost about a fifth of those (in-process with the test client, 0.74-0.77 ms of CPU each, 0.56-0.63 ms so).
    ctx = await get_context(request)
    node = await current_node(request, ctx)
    return rendering.json(await _answer(ctx, node, request, await _read_heartbeat(request)))


async def _answer(ctx: ServerContext, node: NodeCaller, request: Request, body: Heartbeat) -> HeartbeatReply:
    """The reply to `node`'s heartbeat `body` (see `heartbeat`)."""
    signals = ctx.signals
    ticket = signals.arrive(node.name)  # an older heartbeat of this node still held returns now
    changed = signals.event(node.name)
    if body.samples:
        request.app.state.monitoring.receive(node.id, body.samples)
    # Most of a fleet's heartbeats are answered from memory, here on the event loop; the rest in a thread.
    recalled = agent.recall(ctx, node, body)
    outcome = recalled if recalled is not None else await run_in_threadpool(
        retry_deadlocks, lambda: agent.heartbeat(ctx, node, body))
    if outcome.poke:
        signals.poke()
    signals.wake(outcome.woken - {node.name})
    scheduler = request.app.state.scheduler
    if (outcome.reply.ack and node.name not in outcome.woken and not signals.closing
            and (number := scheduler.next_tick()) is not None):
        return await _with_starts(ctx, node, body, outcome.reply, changed, scheduler.after_next_tick(number))
    # Held at most a third of the lease: an agent that does not know this server's lease yet (its first heartbeat)
    # asks for a third of its default one, and a reply after the lease is one it must throw away.
    wait_s = min(body.wait_s, ctx.settings.lease_s / 3)
    if wait_s <= 0 or not outcome.idle or node.name in outcome.woken or signals.closing:
        return outcome.reply
    with signals.held(node.name):
        woken = await _hold(ctx, changed, wait_s)
    if woken:
        if signals.superseded(node.name, ticket):
            # Its agent dropped it to send a newer one, which is answered from the store: nothing reads this reply.
            return outcome.reply
        generation, reply = await _woken_reply(ctx, node)
        agent.expect_started(ctx, node, body, generation, reply)
        return reply
    return outcome.reply


async def _woken_reply(ctx: ServerContext, node: NodeCaller) -> tuple[tuple[int, int], HeartbeatReply]:
    """The reply of a heartbeat held until its node was woken: the one the waking tick read, else read now; and the
    node's generation before it was read (a wake since makes it old)."""
    generation = ctx.signals.generation(node.name)
    ready = ctx.signals.ready(node.name)
    reply = ready if isinstance(ready, HeartbeatReply) else await run_in_threadpool(agent.desired_reply, ctx, node)
    return generation, reply


async def _with_starts(ctx: ServerContext, node: NodeCaller, body: Heartbeat, reply: HeartbeatReply,
                       changed: asyncio.Event, tick: Coroutine[Any, Any, None]) -> HeartbeatReply:
    """`reply`, to a heartbeat that reported ends, with the node's desired jobs as they are once `tick` has run,
    where it (or anything else) changed them: the node then starts the jobs given its freed GPUs at once."""
    woken, ticked = asyncio.ensure_future(changed.wait()), asyncio.ensure_future(tick)
    try:
        with ctx.signals.held(node.name):  # so the tick reads the reply in its own transaction (`Signals.ready`)
            await asyncio.wait((woken, ticked), timeout=NEXT_TICK_WAIT_S, return_when=asyncio.FIRST_COMPLETED)
    finally:
        woken.cancel()
        ticked.cancel()
    if not changed.is_set() or ctx.signals.closing:
        return reply
    generation, fresh = await _woken_reply(ctx, node)
    return agent.with_new_jobs(ctx, node, body, reply, fresh, generation)


async def _hold(ctx: ServerContext, changed: asyncio.Event, wait_s: float) -> bool:
    """Wait until `changed` is set (by this server, or by another server sharing the PostgreSQL database, through
    `nanum.server.bus`) or `wait_s` passes. True if something changed."""
    if ctx.signals.closing:
        return True
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(changed.wait(), timeout=wait_s)
        return True
    return ctx.signals.closing
