"""The agent endpoint: one heartbeat in, the node's desired jobs out, held open while nothing changes.

Readings the heartbeat carries are recorded first (`nanum.server.monitoring`), so a job released for being idle
is already off the node's list in this reply."""

from __future__ import annotations

import asyncio
import contextlib
import time

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from nanum.protocol import Heartbeat, HeartbeatReply
from nanum.server.auth import Context, NodeDep
from nanum.server.callers import NodeCaller
from nanum.server.context import ServerContext
from nanum.server.services import agent
from nanum.store.db import retry_deadlocks

router = APIRouter(prefix="/agent", tags=["agent"])

#: While holding a heartbeat on PostgreSQL, look this often whether another server changed the node's jobs.
SHARED_DB_CHECK_S = 1.0


@router.post("/heartbeat")
async def heartbeat(body: Heartbeat, ctx: Context, node: NodeDep, request: Request) -> HeartbeatReply:
    """Record the node's report and reply with the jobs it should run. With `wait_s` > 0 and nothing to change,
    the reply is held until the node's jobs change or `wait_s` passes."""
    signals = ctx.signals
    signals.wake_now([node.name])  # an older heartbeat of this node still held returns now
    changed = signals.event(node.name)
    if body.samples:
        await run_in_threadpool(request.app.state.monitoring.record, node.id, body.samples)
    outcome = await run_in_threadpool(retry_deadlocks, lambda: agent.heartbeat(ctx, node, body))
    if outcome.poke:
        signals.poke()
    signals.wake(outcome.woken - {node.name})
    if body.wait_s <= 0 or not outcome.idle or node.name in outcome.woken or signals.closing:
        return outcome.reply
    if await _hold(ctx, node, changed, body.wait_s, outcome.version):
        return await run_in_threadpool(agent.desired_reply, ctx, node)
    return outcome.reply


async def _hold(ctx: ServerContext, node: NodeCaller, changed: asyncio.Event, wait_s: float, version: int) -> bool:
    """Wait until `changed` is set, the node's desired version moves past `version` (a change made by another
    server sharing the PostgreSQL database), or `wait_s` passes. True if something changed."""
    deadline = time.monotonic() + wait_s
    while not ctx.signals.closing:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        step = min(left, SHARED_DB_CHECK_S) if ctx.db.is_postgres else left
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), timeout=step)
            return True
        if ctx.db.is_postgres and await run_in_threadpool(agent.desired_version, ctx, node) != version:
            return True
    return True
