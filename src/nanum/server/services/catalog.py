"""Cached read models for the hot request paths: the node inventory and the labs with their limits.

Submitting a job checks it against every node's hardware and its lab's limits; reading them from the database on
every submit would cost more than the insert itself. Both caches expire after a few seconds and are dropped when
this server changes them (a new inventory, a lab edited).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import Text, cast, select

from nanum.core import Lab, Node, NodeState
from nanum.server.context import ServerContext
from nanum.server.views import FLEET_COLUMNS, core_lab, core_node
from nanum.store import LabRow, NodeRow


@dataclass(frozen=True, slots=True)
class LabEntry:
    id: int
    lab: Lab


def nodes(ctx: ServerContext) -> tuple[Node, ...]:
    """Every node that has reported its hardware (down ones too: they may come back)."""
    return ctx.caches.nodes.get_or_load("all", lambda: _load_nodes(ctx))  # type: ignore[return-value]


def labs(ctx: ServerContext) -> Mapping[str, LabEntry]:
    return ctx.caches.labs.get_or_load("all", lambda: _load_labs(ctx))  # type: ignore[return-value]


def _load_nodes(ctx: ServerContext) -> tuple[Node, ...]:
    """The nodes, each made anew only where its row changed since the last load: inventories are read as text and
    parsed only then (at 1,000 nodes, parsing every inventory was most of a load)."""
    with ctx.db.read() as s:
        rows = s.connection().execute(_NODES).all()
    last, found = ctx.caches.node_objects, {}
    for r in rows:
        key = tuple(r)
        kept = last.get(r.name)
        if kept is None or kept[0] != key:
            kept = (key, core_node(r.name, json.loads(r.inventory), NodeState.UP, fleet=r))
        found[r.name] = kept
    ctx.caches.node_objects = found
    return tuple(node for _, node in found.values())


_NODES = (
    select(NodeRow.name, cast(NodeRow.inventory, Text).label("inventory"), *FLEET_COLUMNS)
    .where(NodeRow.inventory.is_not(None))
    .order_by(NodeRow.name)
)


def _load_labs(ctx: ServerContext) -> dict[str, LabEntry]:
    with ctx.db.read() as s:
        return {row.name: LabEntry(row.id, core_lab(row)) for row in s.scalars(select(LabRow))}
