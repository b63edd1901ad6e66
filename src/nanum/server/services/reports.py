"""The store's history as a simulator trace (`GET /api/v1/trace`, `nanum trace export`).

Every job that held GPUs and started in the window becomes one row of the normalised trace (`nanum.sim.traces`):
finished jobs with the run time they really needed, running jobs with the time they have run so far (status
`running`). The run time of a job that was preempted is its GPU service minus the work it lost, per GPU, so a replay
gives it the work it did, not the work thrown away. Jobs that never started (cancelled while pending) used no
GPU and are left out, as are jobs that asked for no GPU (the simulator schedules GPUs only); the answer counts both.

The cluster comes with it: the nodes grouped by shape (GPUs per node, model, CPUs, memory), the labs with their
quotas, and the server's policy, so `nanum sim` replays the history under the rules that produced it.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from sqlalchemy import select

from nanum.server.context import ServerContext
from nanum.store import JobRow, LabRow, NodeRow, UserRow

#: Shortest run time written: the trace format needs a positive duration.
MIN_DURATION_S = 0.001


def export_trace(ctx: ServerContext, since: float, until: float, now: float) -> dict[str, Any]:
    """Jobs started in [since, until) as trace rows, the cluster as a cluster-file dict, and what was left out."""
    with ctx.db.read() as s:
        users = {r.id: r.name for r in s.execute(select(UserRow.id, UserRow.name))}
        lab_rows = list(s.scalars(select(LabRow).order_by(LabRow.name)))
        labs = {lab.id: lab.name for lab in lab_rows}
        rows = s.scalars(
            select(JobRow)
            .where(JobRow.start_time.is_not(None), JobRow.submit_time >= since, JobRow.submit_time < until)
            .order_by(JobRow.submit_time, JobRow.id)
        ).all()
        jobs, skipped = [], Counter[str]()
        for row in rows:
            if row.gpus * row.nodes <= 0:
                skipped["asked for no GPU"] += 1
                continue
            jobs.append(_trace_row(row, users.get(row.user_id, ""), labs.get(row.lab_id, ""), now))
        inventories = [r.inventory for r in s.scalars(select(NodeRow).order_by(NodeRow.name)) if r.inventory]
        cluster = _cluster(inventories, lab_rows, ctx.policy.lend, ctx.policy.reclaim)
    return {"policy": ctx.policy.label, "since": since, "until": until, "jobs": jobs, "cluster": cluster,
            "skipped": dict(skipped)}


def _trace_row(row: JobRow, user: str, lab: str, now: float) -> dict[str, Any]:
    total = row.gpus * row.nodes
    assert row.start_time is not None
    running = row.state == "running" or row.end_time is None
    end = now if running else float(row.end_time or now)
    if row.preemptions:
        duration = (row.attained_gpu_seconds - row.lost_gpu_seconds) / total
        if running:  # the current run has not been charged yet
            duration = max(duration, end - row.start_time)
    else:
        duration = end - row.start_time
    return {
        "job_id": str(row.id), "submit_time": row.submit_time, "duration": max(duration, MIN_DURATION_S),
        "num_gpus": total, "user": user, "lab": lab, "gpu_type": row.gpu_model or "",
        "num_nodes": row.nodes, "time_limit": row.time_limit_s, "status": "running" if running else row.state,
        "name": row.name, "priority": row.priority, "kind": row.kind,
    }


def _cluster(inventories: list[dict[str, Any]], labs: list[LabRow], lend: bool, reclaim: bool) -> dict[str, Any]:
    """A cluster-file dict (`nanum.sim.cluster.cluster_from_dict`): one node group per node shape."""
    shapes: Counter[tuple[int, str, int, int]] = Counter()
    for inv in inventories:
        gpus = inv.get("gpus", ())
        if not gpus:
            continue
        model = str(gpus[0].get("model") or "GPU")
        shapes[(len(gpus), model, int(inv.get("cpus", 0)), int(inv.get("memory_mb", 0)))] += 1
    groups = [{"name": f"{model.lower()}x{n}-{i}", "count": count, "gpus": n, "model": model, "cpus": cpus,
               "memory_mb": memory}
              for i, ((n, model, cpus, memory), count) in enumerate(sorted(shapes.items()))]
    quotas = {}
    for lab in labs:
        body = {k: getattr(lab, k) for k in ("guaranteed_gpus", "max_gpus", "max_running_jobs", "monthly_gpu_hours")
                if getattr(lab, k) is not None}
        if lab.weight != 1.0:
            body["weight"] = lab.weight
        quotas[lab.name] = body
    return {"name": "history", "lend": lend, "reclaim": reclaim, "nodes": groups, "labs": quotas}


# -- the usage report (`GET /api/v1/reports/usage`, `nanum report usage`) ------------------------------------------

USAGE_GROUPS = ("lab", "user", "gpu-model", "day", "week")
TOP_USERS = 10


def usage_report(ctx: ServerContext, win: Any, by: str, now: float) -> dict[str, Any]:
    """GPU-hours used against available, allocation against measured GPU utilisation, GPU-hours held while idle,
    waits (p50, p95), work lost to preemption and budget use, grouped `by`; plus each lab's waits and the top users.

    Utilisation and idle-but-held come from monitoring: a job's mean GPU utilisation and its share of idle readings
    (`job_stats`), applied to its GPU-hours in the window; jobs with no readings count as unmeasured. Available
    GPU-hours: the GPUs the nodes have now times the window so far (from the first node's registration, until
    `now` where the window has not ended: this month's report compares the hours used with those gone by)."""
    from nanum.server.errors import BadRequest
    from nanum.server.schemas import iso
    from nanum.server.services import usage
    from nanum.store.monitoring import JobStatsRow

    if by not in USAGE_GROUPS:
        raise BadRequest(f"invalid by {by!r}: choose {', '.join(USAGE_GROUPS)}")
    with ctx.db.read() as s:
        pieces = [*usage._charged(s.execute(usage._segments(win))),
                  *usage._running(s.execute(usage._running_query()), now)]
        ids = {p.job_id for p in pieces}
        models = {r.id: r.gpu_model for r in s.execute(select(JobRow.id, JobRow.gpu_model).where(JobRow.id.in_(ids)))}
        stats = {r.job_id: r for r in s.execute(select(JobStatsRow.job_id, JobStatsRow.readings, JobStatsRow.util_sum,
                                                       JobStatsRow.idle, JobStatsRow.gpu_model)
                                                .where(JobStatsRow.job_id.in_(ids)))}
        nodes = list(s.execute(select(NodeRow.inventory, NodeRow.created)))
        budgets = {r.name: r.monthly_gpu_hours for r in s.execute(select(LabRow.name, LabRow.monthly_gpu_hours))}
        user_budgets = {r.name: r.monthly_gpu_hours for r in s.execute(select(UserRow.name, UserRow.monthly_gpu_hours))}
    gpus = sum(len((inv or {}).get("gpus", ())) for inv, _ in nodes)
    first = min((created for _, created in nodes), default=win.until)
    available_s = gpus * max(min(win.until, now) - max(win.since, first), 0.0)
    groups: dict[str, _Group] = {}
    labs: dict[str, _Group] = {}
    users: dict[str, _Group] = {}
    total = _Group()
    for p in pieces:
        st = stats.get(p.job_id)
        model = (st.gpu_model if st is not None and st.gpu_model else None) or models.get(p.job_id) or "any"
        for key, start, end in _pieces(p, win, by, model):
            for g in (groups.setdefault(key, _Group()), labs.setdefault(p.lab, _Group()),
                      users.setdefault(p.user, _Group()), total):
                g.add(p, start, end, win, st)
    months = max((win.until - win.since) / (30.4375 * 86400.0), 0.0) if win.since > 0 else None
    budget_of = budgets if by == "lab" else user_budgets if by == "user" else {}
    rows = [groups[k].out(k, budget_of.get(k), months) for k in sorted(groups)]
    top = sorted(users.items(), key=lambda kv: -kv[1].gpu_s)[:TOP_USERS]
    return {
        "since": iso(win.since) if win.since > 0 else None, "until": iso(win.until), "by": by, "gpus": gpus,
        "available_gpu_hours": round(available_s / 3600.0, 3),
        "used_percent": round(100.0 * total.gpu_s / available_s, 1) if available_s else None,
        "rows": rows, "total": total.out("total", None, None),
        "labs": [labs[k].out(k, budgets.get(k), months) for k in sorted(labs)],
        "top_users": [g.out(k, user_budgets.get(k), months) for k, g in top],
    }


class _Group:
    """One row's tally."""

    def __init__(self) -> None:
        self.gpu_s = 0.0
        self.jobs: set[int] = set()
        self.waits: list[float] = []
        self.lost = 0.0
        self.measured_s = 0.0
        self.util_s = 0.0  # GPU-seconds x utilisation (0..1), over measured jobs
        self.idle_s = 0.0  # GPU-seconds held while idle, over measured jobs

    def add(self, p: Any, start: float, end: float, win: Any, st: Any) -> None:
        held = p.gpus * (end - start)
        self.gpu_s += held
        self.jobs.add(p.job_id)
        if p.wait_s is not None and start == p.start and win.since <= p.start < win.until:
            self.waits.append(p.wait_s)
        if p.lost and end == p.end and win.since < p.end <= win.until:
            self.lost += p.lost
        if st is not None and st.readings:
            self.measured_s += held
            self.util_s += held * min(st.util_sum / st.readings, 100.0) / 100.0
            self.idle_s += held * st.idle / st.readings

    def out(self, key: str, budget: float | None, months: float | None) -> dict[str, Any]:
        from nanum.sim.metrics import percentile

        hours = self.gpu_s / 3600.0
        return {
            "key": key, "gpu_hours": round(hours, 4), "jobs": len(self.jobs),
            "gpu_util_percent": round(100.0 * self.util_s / self.measured_s, 1) if self.measured_s else None,
            "measured_gpu_hours": round(self.measured_s / 3600.0, 4),
            "idle_held_gpu_hours": round(self.idle_s / 3600.0, 4),
            "wait_p50_s": round(percentile(self.waits, 50), 1) if self.waits else None,
            "wait_p95_s": round(percentile(self.waits, 95), 1) if self.waits else None,
            "lost_gpu_hours": round(self.lost / 3600.0, 4),
            "budget_gpu_hours": budget,
            "budget_percent": round(100.0 * hours / (budget * months), 1) if budget and months else None,
        }


def _pieces(p: Any, win: Any, by: str, model: str) -> list[tuple[str, float, float]]:
    """The piece clipped to the window as (key, start, end), cut at UTC midnights (day) or Mondays (week)."""
    from nanum.server.services import usage

    if by in ("lab", "user", "day"):
        return usage._split(p, win, by)
    clipped = usage._split(p, win, "lab")
    if by == "gpu-model":
        return [(model, start, end) for _, start, end in clipped]
    out = []
    for _, start, end in clipped:
        while True:
            monday = _monday(start) + WEEK
            cut = min(monday, end)
            out.append((time.strftime("%G-W%V", time.gmtime(start)), start, cut))
            if cut >= end:
                break
            start = cut
    return out


WEEK = 7 * 86400.0


def _monday(t: float) -> float:
    day = t // 86400.0
    return (day - (day + 3) % 7) * 86400.0  # 1970-01-01 was a Thursday
