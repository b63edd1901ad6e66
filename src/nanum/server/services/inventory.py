"""Which GPUs of a node are scheduled: the ones it was taken into service with, never what a heartbeat claims.

A node token in the wrong hands could otherwise report 64 GPUs the machine does not have and have jobs started on
them. So the first heartbeat of a node records its GPUs (index, uuid, model) as accepted; every later heartbeat is
split into the accepted GPUs it still reports, which are scheduled, and the rest (more GPUs, or another uuid or
model at an index), which are not: the node shows them (`nanum nodes`), the server logs and audits the mismatch
once, and they wait for an admin's `nanum node accept NAME`. A GPU that stops being reported is out at once (the
safe direction), and comes back on its own if it is reported again.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from nanum.server.context import ServerContext
from nanum.server.errors import Conflict, NotFound
from nanum.store import AuditRow, NodeRow

log = logging.getLogger("nanum.nodes")

Gpu = dict[str, Any]
IDENTITY = ("index", "uuid", "model")


def identity(gpu: Gpu) -> tuple[Any, ...]:
    return tuple(gpu.get(k) for k in IDENTITY)


def split(reported: list[Gpu], accepted: list[Gpu]) -> tuple[list[Gpu], list[Gpu]]:
    """(reported GPUs that were accepted, the others). Each accepted GPU matches one reported GPU at most."""
    left = Counter(identity(g) for g in accepted)
    usable, extra = [], []
    for gpu in reported:
        key = identity(gpu)
        if left[key] > 0:
            left[key] -= 1
            usable.append(gpu)
        else:
            extra.append(gpu)
    return usable, extra


def describe(gpus: list[Gpu]) -> str:
    """'64 GPUs (64×H100)', '1 GPU (1×A100)'."""
    models = Counter(str(g.get("model") or "unknown") for g in gpus)
    kinds = ", ".join(f"{n}×{model}" for model, n in sorted(models.items()))
    return f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} ({kinds})"


def record(s: Session, node: NodeRow, reported: list[Gpu], now: float) -> list[Gpu]:
    """The GPUs of this heartbeat that may be scheduled; keeps the node's unaccepted GPUs and reports a change."""
    if node.accepted_gpus is None:
        node.accepted_gpus = [_identity_dict(g) for g in reported]
    usable, extra = split(reported, node.accepted_gpus)
    shown = node.unaccepted_gpus or []
    if extra != shown:
        node.unaccepted_gpus = extra or None
        if extra:
            _mismatch(s, node, extra, now)
    return usable


def _mismatch(s: Session, node: NodeRow, extra: list[Gpu], now: float) -> None:
    message = (
        f"node {node.name} reports {describe(extra)} it was not accepted with; they are not scheduled until an "
        f"admin runs `nanum node accept {node.name}`"
    )
    log.warning("%s", message)
    s.add(AuditRow(time=now, actor="nanum", kind="node", name=node.name, action="mismatch",
                   changes={"accepted": node.accepted_gpus, "unaccepted": extra}, message=message))


def accept(ctx: ServerContext, name: str, actor: str) -> str:
    """Schedule every GPU the node reported last (an admin's decision). Returns what was accepted, in words."""
    now = ctx.clock()
    with ctx.db.write() as s:
        node = s.scalars(select(NodeRow).where(NodeRow.name == name).with_for_update()).first()
        if node is None:
            raise NotFound(f"no node named {name}; `nanum nodes` lists them")
        extra = node.unaccepted_gpus or []
        if not extra:
            raise Conflict(f"node {name} reports no GPU beyond those accepted; there is nothing to accept")
        inventory = dict(node.inventory or {})
        gpus = sorted([*inventory.get("gpus", ()), *extra], key=lambda g: (g.get("index", 0), g.get("uuid", "")))
        node.inventory = {**inventory, "gpus": gpus}
        before = node.accepted_gpus
        node.accepted_gpus = [_identity_dict(g) for g in gpus]
        node.unaccepted_gpus = None
        message = f"{actor} accepted {describe(extra)} of node {name}; it now has {describe(gpus)}"
        s.add(AuditRow(time=now, actor=actor, kind="node", name=name, action="accept",
                       changes={"accepted": [before, node.accepted_gpus]}, message=message))
    log.info("%s", message)
    ctx.caches.nodes.clear()
    ctx.signals.wake([name])  # its next heartbeat is checked against the GPUs now accepted
    ctx.signals.poke()
    return message


def _identity_dict(gpu: Gpu) -> Gpu:
    return {k: gpu.get(k) for k in IDENTITY}
