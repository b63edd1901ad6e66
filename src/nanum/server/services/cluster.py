"""The cluster at a glance: every node and GPU with its latest reading, the job and user holding it, and totals.

Read by the dashboard's Cluster and Nodes pages, their live JSON, and `/metrics`, in four queries whatever the
cluster's size. A GPU is, in this order of precedence:

- `busy` / `idle`: a job holds it; `idle` while that job is in an idle streak (see `nanum.monitor.idle`);
- `down`: its node is down (silent past the timeout, or not yet back);
- `drained`: out of service, by an admin's `nanum node drain` or by its own health (Xid, ECC, retired pages):
  nothing new starts there until `nanum node resume`, though it works;
- `rogue`: a process that no nanum job owns runs on it: it is not handed out;
- `free`.

Down and drained are told apart: a drain is planned, and an alert on GPUs down should not fire for one.

Pages, their live data and `/metrics` read the view through `shared`: where building it takes long (at 1,000
nodes × 8 GPUs, about 0.2 s of CPU), one view serves every request of the next second (`Caches.shared`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import select

from nanum.jobref import ref_of
from nanum.server.context import ServerContext
from nanum.store import AllocationRow, JobRow, JobStatsRow, LabRow, NodeLiveRow, NodeRow, UserRow, table


@dataclass(slots=True)
class GpuView:
    index: int
    model: str
    memory_mb: int
    state: str = "free"
    util: float | None = None
    memory_used_mb: int | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    job_id: int | None = None
    #: the job as users name it (`nanum.jobref`): `12_7` for an array's task.
    job_ref: str | None = None
    job_name: str | None = None
    user: str | None = None
    lab: str | None = None
    kind: str | None = None
    idle_stage: str | None = None
    idle_since: float | None = None
    processes: list[dict[str, Any]] = field(default_factory=list)
    #: the health problem that took it out of service, until an admin resumes the node.
    health: str | None = None

    @property
    def strangers(self) -> list[dict[str, Any]]:
        """Processes on this GPU that its holder (if any) does not own."""
        return [p for p in self.processes if p.get("job_id") is None or p.get("job_id") != self.job_id]


@dataclass(slots=True)
class NodeView:
    name: str
    state: str
    model: str
    cpus: int
    memory_mb: int
    simulated: bool
    last_seen: float | None
    sampled_at: float | None
    gpus: list[GpuView]
    drain_reason: str | None = None
    owner: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Totals:
    total: int = 0
    busy: int = 0
    idle: int = 0
    free: int = 0
    down: int = 0
    drained: int = 0
    rogue: int = 0

    #: the GPU states, each a field
    STATES = ("busy", "idle", "free", "rogue", "drained", "down")


@dataclass(slots=True)
class ClusterView:
    time: float
    nodes: list[NodeView]
    totals: Totals


_LIVE = table(NodeLiveRow)
_HOLDERS = (
    select(
        AllocationRow.node_id,
        AllocationRow.gpu_index,
        JobRow.id,
        JobRow.name,
        JobRow.kind,
        JobRow.array_id,
        JobRow.array_task,
        UserRow.name.label("user"),
        LabRow.name.label("lab"),
        JobStatsRow.idle_stage,
        JobStatsRow.idle_since,
    )
    .join(JobRow, JobRow.id == AllocationRow.job_id)
    .join(UserRow, UserRow.id == JobRow.user_id)
    .join(LabRow, LabRow.id == JobRow.lab_id)
    .outerjoin(JobStatsRow, JobStatsRow.job_id == JobRow.id)
)


def shared(ctx: ServerContext) -> ClusterView:
    """The cluster view as this server's pages, live data and `/metrics` read it (see the module docstring)."""
    return ctx.caches.shared("cluster", lambda: cluster(ctx))


def cluster(ctx: ServerContext, now: float | None = None) -> ClusterView:
    now = ctx.clock() if now is None else now
    timeout = ctx.settings.node_timeout_s
    with ctx.db.read() as s:
        nodes = s.execute(
            select(NodeRow.id, NodeRow.name, NodeRow.inventory, NodeRow.state, NodeRow.last_seen,
                   NodeRow.drain_reason, NodeRow.owner, NodeRow.labels, NodeRow.gpu_health)
            .where(NodeRow.inventory.is_not(None))
            .order_by(NodeRow.name)
        ).all()
        live = {r.node_id: r for r in s.execute(select(_LIVE.c.node_id, _LIVE.c.time, _LIVE.c.gpus, _LIVE.c.rogue))}
        holders = {(r.node_id, r.gpu_index): r for r in s.execute(_HOLDERS)}
    seen = ctx.last_seen.since
    views = [_node(r, seen(r.id, r.last_seen), live.get(r.id), holders, now, timeout) for r in nodes]
    totals = Totals()
    for node in views:
        for gpu in node.gpus:
            totals.total += 1
            setattr(totals, gpu.state, getattr(totals, gpu.state) + 1)
    return ClusterView(now, views, totals)


def node_state(state: str, last_seen: float | None, now: float, timeout: float) -> Literal["up", "draining", "down"]:
    if state == "draining":
        return "draining"
    fresh = last_seen is not None and now - last_seen <= timeout
    return "up" if fresh and state == "up" else "down"


def _node(row: Any, last_seen: float | None, live: Any, holders: dict[tuple[int, int], Any], now: float,
          timeout: float) -> NodeView:
    """`last_seen`: when the node was last heard from (`LastSeen.since`)."""
    inv = row.inventory or {}
    state: str = node_state(row.state, last_seen, now, timeout)
    fresh = live is not None and state != "down" and now - live.time <= timeout
    readings = {int(g["index"]): g for g in (live.gpus if fresh else ())}
    rogue = set(live.rogue) if fresh else set()
    gpus = []
    for g in inv.get("gpus", ()):
        index = int(g["index"])
        view = GpuView(index, str(g.get("model", "")), int(g.get("memory_mb", 0)))
        _reading(view, readings.get(index))
        _holder(view, holders.get((row.id, index)))
        view.health = (row.gpu_health or {}).get(str(index), {}).get("problem")
        view.state = _gpu_state(view, state, index in rogue)
        gpus.append(view)
    model = gpus[0].model if gpus else ""
    if state == "draining" and all(g.job_id is None for g in gpus):
        state = "drained"
    return NodeView(
        name=row.name,
        state=state,
        model=model,
        cpus=int(inv.get("cpus", 0)),
        memory_mb=int(inv.get("memory_mb", 0)),
        simulated=bool(inv.get("simulated")),
        last_seen=last_seen,
        sampled_at=live.time if fresh else None,
        gpus=gpus,
        drain_reason=row.drain_reason,
        owner=row.owner,
        labels=dict(row.labels or {}),
    )


def _reading(view: GpuView, reading: dict[str, Any] | None) -> None:
    if reading is None:
        return
    view.util = float(reading.get("util", 0.0))
    view.memory_used_mb = int(reading.get("memory_mb", 0))
    view.power_w = reading.get("power_w")
    view.temperature_c = reading.get("temperature_c")
    view.processes = list(reading.get("processes", ()))


def _holder(view: GpuView, holder: Any) -> None:
    if holder is None:
        return
    view.job_id, view.job_name, view.kind = holder.id, holder.name, holder.kind
    view.job_ref = ref_of(holder.id, holder.array_id, holder.array_task)
    view.user, view.lab = holder.user, holder.lab
    view.idle_stage, view.idle_since = holder.idle_stage, holder.idle_since


def _gpu_state(view: GpuView, node_state: str, rogue: bool) -> str:
    if view.job_id is not None:
        return "idle" if view.idle_stage in ("idle", "flagged", "released") else "busy"
    if node_state == "down":
        return "down"
    if node_state != "up" or view.health:
        return "drained"
    return "rogue" if rogue else "free"
