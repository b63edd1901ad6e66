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
