"""Nodes as people see them: state, hardware, and which job and user hold each GPU."""

from __future__ import annotations

import time

from sqlalchemy import select

from nanum.server.context import ServerContext
from nanum.server.schemas import GpuOut, NodeOut, iso
from nanum.store import AllocationRow, JobRow, NodeRow, UserRow


def list_nodes(ctx: ServerContext) -> list[NodeOut]:
    now, timeout = time.time(), ctx.settings.node_timeout_s
    with ctx.db.read() as s:
        nodes = s.scalars(select(NodeRow).order_by(NodeRow.name)).all()
        holders = {
            (node_id, gpu): (job_id, user)
            for node_id, gpu, job_id, user in s.execute(
                select(AllocationRow.node_id, AllocationRow.gpu_index, AllocationRow.job_id, UserRow.name)
                .join(JobRow, JobRow.id == AllocationRow.job_id)
                .join(UserRow, UserRow.id == JobRow.user_id)
            )
        }
    return [_node_out(n, holders, now, timeout) for n in nodes]


def _node_out(node: NodeRow, holders: dict[tuple[int, int], tuple[int, str]], now: float, timeout: float) -> NodeOut:
    inv = node.inventory or {}
    gpus = []
    for g in inv.get("gpus", ()):
        job_id, user = holders.get((node.id, int(g["index"])), (None, None))
        gpus.append(
            GpuOut(
                index=g["index"],
                uuid=g.get("uuid", ""),
                model=g.get("model", ""),
                memory_mb=g.get("memory_mb", 0),
                job_id=job_id,
                user=user,
            )
        )
    fresh = node.last_seen is not None and now - node.last_seen <= timeout
    state = "draining" if node.state == "draining" else "up" if fresh and node.state == "up" else "down"
    return NodeOut(
        name=node.name,
        state=state,
        last_seen=iso(node.last_seen),
        simulated=bool(inv.get("simulated")),
        cpus=int(inv.get("cpus", 0)),
        memory_mb=int(inv.get("memory_mb", 0)),
        gpus=gpus,
    )
