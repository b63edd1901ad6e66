"""A user's API tokens: the first one (`users.token_hash`, from `nanum user add`, an import or `nanum up`) and
any number more (`tokens`), each with a name and an optional expiry, e.g. one per `nanum login` on a laptop.

Tokens are shown once and stored as SHA-256. An expired token is refused with when it expired; a day after, it is
purged (at server start, by the server's upkeep every minute, and whenever a token is made) and is gone from
`nanum token list` and the table. A revoked one is gone at once. Users list and revoke their own tokens; admins
anyone's.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from nanum.server.callers import Caller, hash_token, new_token
from nanum.server.context import ServerContext
from nanum.server.errors import Forbidden, NotFound, Unauthorized
from nanum.server.identity import TokenInfo, TokenNew
from nanum.server.schemas import iso
from nanum.store import TokenRow, UserRow

#: `last_used` is written at most this often per token (seconds).
TOUCH_EVERY_S = 60.0
#: The id `GET /tokens` gives a user's first token (the one in `users.token_hash`).
FIRST = 0
#: An expired token is purged this long after it expired (until then, using it says when it expired).
PURGE_AFTER_S = 86400.0


def user_for(ctx: ServerContext, s: Session, digest: str) -> UserRow | None:
    """The user holding this extra token; raises Unauthorized when it has expired. None: no such token."""
    row = s.scalars(select(TokenRow).where(TokenRow.token_hash == digest)).first()
    if row is None:
        return None
    now = ctx.clock()
    if row.expires is not None and row.expires <= now:
        raise Unauthorized(f"this API token ({row.name}) expired at {_when(row.expires)}; run `nanum login` again "
                           "or create a new one with `nanum token create`")
    if row.last_used is None or row.last_used < now - TOUCH_EVERY_S:
        with ctx.db.write() as w:
            w.execute(update(TokenRow).where(TokenRow.id == row.id).values(last_used=now))
    return s.get(UserRow, row.user_id)


def create(ctx: ServerContext, user_id: int, name: str, expires_in_s: float | None) -> TokenNew:
    """A new token for the user; its value is returned only here."""
    token, now = new_token(), ctx.clock()
    expires = None if expires_in_s is None else now + expires_in_s
    purge_expired(ctx, now)
    with ctx.db.write() as s:
        row = TokenRow(user_id=user_id, token_hash=hash_token(token), name=name, created=now, expires=expires)
        s.add(row)
        s.flush()
        return TokenNew(id=row.id, name=name, token=token, created=iso(now), expires=iso(expires))


def purge_expired(ctx: ServerContext, now: float) -> int:
    """Delete the tokens that expired more than PURGE_AFTER_S ago; how many."""
    with ctx.db.write() as s:
        done = s.execute(delete(TokenRow).where(TokenRow.expires.is_not(None),
                                                TokenRow.expires < now - PURGE_AFTER_S))
        return int(getattr(done, "rowcount", 0) or 0)


def list_tokens(ctx: ServerContext, caller: Caller, user: str | None) -> list[TokenInfo]:
    """The tokens of `user` (default: the caller's own), newest last; the first token is listed with id 0."""
    with ctx.db.read() as s:
        owner = _owner(s, caller, user)
        rows = s.scalars(select(TokenRow).where(TokenRow.user_id == owner.id).order_by(TokenRow.id)).all()
        first = TokenInfo(id=FIRST, name="first token", created=iso(owner.created), expires=None, last_used=None)
        return [first, *(TokenInfo(id=r.id, name=r.name, created=iso(r.created), expires=iso(r.expires),
                                   last_used=iso(r.last_used)) for r in rows)]


def revoke(ctx: ServerContext, caller: Caller, token_id: int, user: str | None) -> None:
    """Revoke one token of `user` (default: the caller's own); id 0 is their first token."""
    with ctx.db.write() as s:
        owner = _owner(s, caller, user)
        if token_id == FIRST:
            owner.token_hash = hash_token(new_token())  # nobody holds the new value: the old token is dead
        else:
            row = s.get(TokenRow, token_id)
            if row is None or row.user_id != owner.id:
                raise NotFound(f"{owner.name} has no token {token_id}; `nanum token list` shows their tokens")
            s.delete(row)
    ctx.caches.callers.clear()


def _owner(s: Session, caller: Caller, user: str | None) -> UserRow:
    name = user or caller.name
    if name != caller.name and not caller.admin:
        raise Forbidden("only an admin may list or revoke another user's tokens")
    found = s.scalars(select(UserRow).where(UserRow.name == name)).first()
    if found is None:
        raise NotFound(f"no user named {name}")
    return found


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC")
