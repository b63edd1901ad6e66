"""`nanum demo`: a simulated cluster scheduling a few jobs through the core, printed as a table."""

from __future__ import annotations

from nanum.cli.app import app


@app.command()
def demo() -> None:
    """Schedule a handful of jobs on two simulated 4-GPU nodes and show what the core decides."""
    from rich.console import Console
    from rich.table import Table

    from nanum.core import Gpu, Job, JobId, Node, Policy, Snapshot, schedule

    nodes = tuple(Node(name=f"gpu-{i:02d}", gpus=tuple(Gpu(j, "A100") for j in range(4))) for i in range(2))
    sizes = [(2, 3600), (4, 7200), (3, 1800), (1, 600), (4, 600)]
    jobs = tuple(
        Job(id=JobId(i + 1), user="alice" if i % 2 else "bob", lab="vision", gpus=g, submit_time=float(i),
            time_limit=float(t))
        for i, (g, t) in enumerate(sizes)
    )
    decisions = schedule(Snapshot(now=10.0, nodes=nodes, pending=jobs), Policy())
    table = Table(title="nanum core: one scheduling cycle on 2 × 4 GPUs")
    for col in ("JOB", "USER", "GPUS", "DECISION"):
        table.add_column(col)
    for start in decisions.starts:
        where = ", ".join(f"{p.node}:{','.join(map(str, p.gpus))}" for p in start.placements)
        job = next(j for j in jobs if j.id == start.job_id)
        table.add_row(str(job.id), job.user, str(job.gpus), f"start on {where}")
    for pend in decisions.pending:
        job = next(j for j in jobs if j.id == pend.job_id)
        table.add_row(str(job.id), job.user, str(job.gpus), f"pending: {pend.reason}")
    Console().print(table)
