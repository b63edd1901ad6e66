"""Authentication: FastAPI dependencies that resolve a request's API token (people) or node token (agents) to
the `nanum.server.callers` identity types. A resolved token is cached for a few seconds, so a busy client costs
one hash and one dict lookup per request.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from nanum.server.callers import Caller, NodeCaller, hash_token
from nanum.server.context import ServerContext
from nanum.server.errors import Forbidden, Unauthorized


async def get_context(request: Request) -> ServerContext:
    """The server context (async, so FastAPI resolves it without a trip through the thread pool)."""
    ctx: ServerContext = request.app.state.ctx
    return ctx


Context = Annotated[ServerContext, Depends(get_context)]


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized(
            "missing API token; pass `Authorization: Bearer TOKEN` (run `nanum login` or set NANUM_TOKEN)"
        )
    return token.strip()


async def current_caller(request: Request, ctx: Context) -> Caller:
    from nanum.server.services import logins

    key = "u:" + hash_token(_bearer(request))
    found = ctx.caches.callers.get(key)
    if found is None:
        found = await run_in_threadpool(logins.caller_by_token_hash, ctx, key[2:])
        if found is None:
            raise Unauthorized("unknown API token; check NANUM_TOKEN or run `nanum login` again")
        ctx.caches.callers.put(key, found)
    assert isinstance(found, Caller)
    if found.directory and logins.due(ctx, found.name):
        await run_in_threadpool(logins.recheck, ctx, found.id, found.name, "ldap")
    return found


async def current_node(request: Request, ctx: Context) -> NodeCaller:
    from nanum.server.services import accounts

    key = "n:" + hash_token(_bearer(request))
    found = ctx.caches.node_tokens.get(key)
    if found is None:
        found = await run_in_threadpool(accounts.node_by_token_hash, ctx, key[2:])
        if found is None:
            raise Unauthorized("unknown node token; create one with `nanum node add NAME`")
        ctx.caches.node_tokens.put(key, found)
    assert isinstance(found, NodeCaller)
    return found


async def current_admin(caller: Annotated[Caller, Depends(current_caller)]) -> Caller:
    if not caller.admin:
        raise Forbidden("only an admin may do this")
    return caller


CallerDep = Annotated[Caller, Depends(current_caller)]
AdminDep = Annotated[Caller, Depends(current_admin)]
NodeDep = Annotated[NodeCaller, Depends(current_node)]
