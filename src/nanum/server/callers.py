"""Who a request acts for: the identity types services take (`Caller`, `NodeCaller`) and how tokens are made
and stored. Plain data, no web framework: services import these, and `nanum.server.auth` resolves them from a
request.

Tokens are `secrets.token_urlsafe(32)`, shown once and stored only as SHA-256 hex digests.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

__all__ = ["Caller", "NodeCaller", "hash_token", "new_token"]


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
