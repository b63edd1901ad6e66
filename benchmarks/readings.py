"""What recording GPU readings costs the server: one node's reading at a time, or a second's worth in one go.

    .venv/bin/python benchmarks/readings.py                  # 200 nodes x 8 GPUs, every GPU busy, PostgreSQL
    .venv/bin/python benchmarks/readings.py --db sqlite --nodes 50

A busy node sends a reading of its GPUs every 5 s (`nanum agent --sample-interval`): at 1,000 nodes, about 200 a
second. The server writes them in batches (`nanum.server.monitoring.Readings`), about one a second. This sets up
`--nodes` nodes with a one-GPU job on every GPU (the server's own services, no HTTP), then records `--rounds`
readings of every node: once a node per write (`--batch 1`: what the server did per heartbeat before), and once
all nodes per write. Printed: the server's CPU and wall time per reading, each way.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from tick import Fleet, services

from nanum.protocol import GpuSample, JobSample, Sample
from nanum.server.callers import Caller
from nanum.server.context import ServerContext
from nanum.server.job_schemas import JobSubmit
from nanum.server.scheduler import Scheduler
from nanum.server.services import jobs, samples


def reading(fleet: Fleet, name: str, at: float) -> Sample:
    """One reading of a node: every GPU its jobs hold at 90 %."""
    gpus = [GpuSample(index=g.index, util=90.0, memory_mb=40000, power_w=360.0, temperature_c=75.0)
            for g in fleet.infos[name].gpus]
    return Sample(time=at, gpus=gpus, jobs=[JobSample(job_id=j, cpu_percent=100.0) for j in fleet.running[name]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5, help="readings of every node, each way")
    parser.add_argument("--db", choices=["postgres", "sqlite"], default="postgres")
    args = parser.parse_args()
    with services(args.db) as (ctx, caller):
        run(args, ctx, caller)


def run(args: argparse.Namespace, ctx: ServerContext, caller: Caller) -> None:
    fleet = Fleet(ctx, args.nodes, args.gpus)
    for name in fleet.infos:
        fleet.beat(name)
    total = args.nodes * args.gpus
    for first in range(0, total, 1000):
        last = min(total, first + 1000) - 1
        jobs.submit(ctx, caller, JobSubmit(command=["true"], gpus=1, cpus=0, workdir="/tmp", array=f"{first}-{last}"))
    Scheduler(ctx).tick()
    for _ in range(2):  # each node learns its jobs, then reports them running
        for name in fleet.infos:
            fleet.beat(name)
    node_ids = {name: caller.id for name, caller in fleet.callers.items()}
    at = time.time() - 3600

    def one_round(batch: int) -> tuple[float, float]:
        nonlocal at
        at += 5
        names = list(fleet.infos)
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(0, len(names), batch):
            part = names[i:i + batch]
            samples.record(ctx, {node_ids[n]: [reading(fleet, n, at)] for n in part}, at)
        return time.process_time() - cpu, time.perf_counter() - wall

    print(f"{args.nodes} nodes x {args.gpus} GPUs, a job on every GPU, {args.db}; per reading of one node:")
    for batch, label in ((1, "a write per node's reading"), (args.nodes, f"{args.nodes} readings per write")):
        one_round(batch)  # warm up
        rounds = [one_round(batch) for _ in range(args.rounds)]
        cpu = statistics.median(c for c, _ in rounds) / args.nodes * 1000
        wall = statistics.median(w for _, w in rounds) / args.nodes * 1000
        print(f"  {label:>28}: {cpu:.2f} ms CPU, {wall:.2f} ms wall", flush=True)


if __name__ == "__main__":
    main()
