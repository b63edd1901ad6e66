"""Nodes as people see them: state, hardware, which job and user hold each GPU, its latest reading, and any
process on it that no nanum job owns."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal

from sqlalchemy import select

from nanum.jobref import ref_of
from nanum.server.context import ServerContext
from nanum.server.errors import NotFound
from nanum.server.schemas import GpuOut, NodeDetail, NodeOut, iso
from nanum.server.services import audit, samples
from nanum.server.services.cluster import node_state
from nanum.store import AllocationRow, JobRow, NodeLiveRow, NodeRow, UserRow


def one_node(ctx: ServerContext, name: str) -> NodeOut:
    """One node as `list_nodes` shows it; 404 naming it when there is none."""
    found = [n for n in list_nodes(ctx) if n.name == name]
    if not found:
        raise NotFound(f"no node named {name}; `nanum nodes` lists them")
    return found[0]


def node_detail(ctx: ServerContext, name: str) -> NodeDetail:
    """One node as `list_nodes` shows it, with its history (`NodeDetail`)."""
    node = one_node(ctx, name)
    with ctx.db.read() as s:
        history = audit.history(s, "node", name)
    return NodeDetail.model_validate({**node.model_dump(), "history": history})


def list_nodes(ctx: ServerContext) -> list[NodeOut]:
    now, timeout = ctx.clock(), ctx.settings.node_timeout_s
    with ctx.db.read() as s:
        nodes = s.scalars(select(NodeRow).order_by(NodeRow.name)).all()
        held = s.execute(
            select(AllocationRow.node_id, AllocationRow.gpu_index, AllocationRow.job_id, UserRow.name, JobRow.array_id,
                   JobRow.array_task)
            .join(JobRow, JobRow.id == AllocationRow.job_id)
            .join(UserRow, UserRow.id == JobRow.user_id)
        ).all()
        live = {r.node_id: r for r in s.scalars(select(NodeLiveRow).where(NodeLiveRow.time >= now - timeout))}
    holders = {(r.node_id, r.gpu_index): r for r in held}
    here: dict[int, set[int]] = defaultdict(set)  # every job holding a part of the node, with a GPU or without
    for r in held:
        here[r.node_id].add(r.job_id)
    seen = ctx.last_seen.since
    out = [_node_out(n, seen(n.id, n.last_seen), holders, now, timeout) for n in nodes]
    for node, row in zip(nodes, out, strict=True):
        if node.id in live and row.state != "down":
            _readings(row, live[node.id].gpus, here[node.id])
    return out


def _readings(node: NodeOut, readings: list[dict[str, Any]], here: set[int]) -> None:
    """The latest reading's figures on `node`'s GPUs, and the processes on them used outside nanum; `here`: the
    jobs holding any part of the node now."""
    by_index = {int(r["index"]): r for r in readings}
    for gpu in node.gpus:
        found = by_index.get(gpu.index)
        if found is not None:
            gpu.util, gpu.memory_used_mb = found.get("util"), found.get("memory_mb")
            gpu.outside = [
                {k: p.get(k) for k in ("pid", "user", "command", "memory_mb")}
                for p in found.get("processes", ())
                if samples.outside_nanum(p.get("job_id"), gpu.job_id, here)
            ]


def _node_out(node: NodeRow, last_seen: float | None, holders: dict[tuple[int, int | None], Any], now: float,
              timeout: float) -> NodeOut:
    """`last_seen`: when the node was last heard from (`LastSeen.since`); `holders`: (node id, GPU index) → the
    allocation's row (its job's id, user, array id and task)."""
    inv = node.inventory or {}
    gpus = []
    for g in inv.get("gpus", ()):
        gpu = GpuOut(index=g["index"], uuid=g.get("uuid", ""), model=g.get("model", ""),
                     memory_mb=g.get("memory_mb", 0))
        held = holders.get((node.id, int(g["index"])))
        if held is not None:
            gpu.job_id, gpu.user = held.job_id, held.name
            gpu.job_ref = ref_of(held.job_id, held.array_id, held.array_task)
        gpus.append(gpu)
    state: Literal["up", "draining", "drained", "down"] = node_state(node.state, last_seen, now, timeout)
    if state == "draining" and not any(g.job_id is not None for g in gpus):
        state = "drained"
    for g in gpus:
        g.model = node.gpu_model or g.model
        g.health = (node.gpu_health or {}).get(str(g.index), {}).get("problem")
    return NodeOut(
        name=node.name,
        state=state,
        drain_reason=node.drain_reason,
        owner=node.owner,
        labels=dict(node.labels or {}),
        last_seen=iso(last_seen),
        simulated=bool(inv.get("simulated")),
        cpus=int(inv.get("cpus", 0)),
        memory_mb=int(inv.get("memory_mb", 0)),
        limits=str(inv.get("limits", "")),
        gpus=gpus,
        unaccepted_gpus=[
            GpuOut(index=g["index"], uuid=g.get("uuid", ""), model=g.get("model", ""), memory_mb=g.get("memory_mb", 0))
            for g in node.unaccepted_gpus or ()
        ],
    )
