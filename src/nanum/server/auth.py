"""Authentication: API tokens for people, node tokens for agents; FastAPI dependencies that resolve them.

Tokens are `secrets.token_urlsafe(32)`, shown once and stored only as SHA-256 hex digests. A resolved token is
cached for a few seconds, so a busy client costs one hash and one dict lookup per request.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from nanum.server.context import ServerContext
from nanum.server.errors import Forbidden, Unauthorized


def new_token() -> str:
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Caller:
    """The user a request acts for."""

    id: int
    name: str
    admin: bool
    unix_user: str | None
    default_lab: str | None
    labs: frozenset[str]
    #: The user's own cap on GPUs held at once (None: only the lab's), to refuse a job that could never start.
    max_gpus: int | None = None
    #: The labs this user manages, by name and by id: their members, member limits, jobs and logs.
    managed: frozenset[str] = frozenset()
    managed_ids: frozenset[int] = frozenset()
    #: Made from a directory login: their standing there is checked again now and then (services.logins).
    directory: bool = False

    def may_manage(self, owner_id: int, lab_id: int | None = None) -> bool:
        """May act on a job of `owner_id` charged to lab `lab_id`: its owner, a manager of that lab, an admin."""
        return self.admin or self.id == owner_id or (lab_id is not None and lab_id in self.managed_ids)

    def manages(self, lab: str) -> bool:
        """May manage lab `lab`'s members and their limits: an admin, or a manager of that lab."""
        return self.admin or lab in self.managed


@dataclass(frozen=True, slots=True)
class NodeCaller:
    """The node an agent request speaks for."""

    id: int
    name: str


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
    from nanum.server.services import accounts

    key = "u:" + hash_token(_bearer(request))
    found = ctx.caches.callers.get(key)
    if found is None:
        found = await run_in_threadpool(accounts.caller_by_token_hash, ctx, key[2:])
        if found is None:
            raise Unauthorized("unknown API token; check NANUM_TOKEN or run `nanum login` again")
        ctx.caches.callers.put(key, found)
    assert isinstance(found, Caller)
    if found.directory:
        from nanum.server.services import logins

        if logins.due(ctx, found.name):
            await run_in_threadpool(logins.recheck, ctx, found.id, found.name, "ldap")
    return found


async def current_node(request: Request, ctx: Context) -> NodeCaller:
    from nanum.server.services import accounts

    key = "n:" + hash_token(_bearer(request))
    found = ctx.caches.callers.get(key)
    if found is None:
        found = await run_in_threadpool(accounts.node_by_token_hash, ctx, key[2:])
        if found is None:
            raise Unauthorized("unknown node token; create one with `nanum node add NAME`")
        ctx.caches.callers.put(key, found)
    assert isinstance(found, NodeCaller)
    return found


async def current_admin(caller: Annotated[Caller, Depends(current_caller)]) -> Caller:
    if not caller.admin:
        raise Forbidden("only an admin may do this")
    return caller


CallerDep = Annotated[Caller, Depends(current_caller)]
AdminDep = Annotated[Caller, Depends(current_admin)]
NodeDep = Annotated[NodeCaller, Depends(current_node)]
