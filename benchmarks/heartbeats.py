"""What a heartbeat that reports nothing new costs the server: N nodes each running one job, each sending such
heartbeats back to back (no long poll) to a real `nanum server` on PostgreSQL, for a fixed time.

    .venv/bin/python benchmarks/heartbeats.py                       # 200 nodes, 20 s
    .venv/bin/python benchmarks/heartbeats.py --nodes 50 --seconds 10 --db sqlite
    .venv/bin/python benchmarks/heartbeats.py --nodes 500 --gap 11 --seconds 33 --warmup 36

`--gap S`: each node waits S seconds between heartbeats instead, as a long-polling node does whose held heartbeat
ends with nothing new (the server holds one at most a third of its lease: 10 s by default). The server is then
not saturated; the CPU per heartbeat is the figure to read. Let the warm-up cover each node's first three
heartbeats (it comes up, is given its job, reports the job's pid): from then on they report nothing new.

Each node first reports its job running (a write: the job's pid); from then on every heartbeat repeats the same
report, which is what most of a fleet's heartbeats are. Printed: heartbeats answered per second (the server is
saturated: this is its capacity for them), reply latency p50/p99, and the server's CPU milliseconds per heartbeat.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from load import pg_schema, server  # the benchmarks' shared helpers
from scale import PG, server_usage

from nanum.protocol import GpuInfo, Heartbeat, HeartbeatReply, JobStatus, NodeInfo


def setup(url: str, admin: str, nodes: int) -> tuple[list[str], str]:
    """Register the nodes (their tokens) and one user (its token)."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=60) as c:
        tokens = []
        for i in range(nodes):
            r = c.post("/api/v1/nodes", json={"name": f"hb{i:04d}"})
            r.raise_for_status()
            tokens.append(str(r.json()["token"]))
        r = c.post("/api/v1/users", json={"name": "beats", "labs": ["fleet"], "unix_user": "nobody"})
        r.raise_for_status()
        return tokens, str(r.json()["token"])


def info(name: str) -> NodeInfo:
    gpus = [GpuInfo(index=i, uuid=f"GPU-{name}-{i}", model="H100", memory_mb=81920) for i in range(8)]
    return NodeInfo(name=name, hostname=name, gpus=gpus, cpus=64, memory_mb=512 * 1024, simulated=True,
                    unix_user="nanum")


async def node(url: str, name: str, token: str, until: list[float], latencies: list[float], gap: float) -> None:
    """Heartbeat until `until[0]`, `gap` seconds apart (the first after a random part of it); latencies of those
    sent after `until[1]` (the warm-up's end)."""
    running: dict[int, JobStatus] = {}
    await asyncio.sleep(random.uniform(0, gap))
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    me = info(name)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60, trust_env=False) as c:
        while time.monotonic() < until[0]:
            body = Heartbeat(node=me, jobs=list(running.values()), wait_s=0).model_dump_json()
            sent = time.monotonic()
            r = await c.post("/api/v1/agent/heartbeat", content=body)
            if sent > until[1]:
                latencies.append(time.monotonic() - sent)
            r.raise_for_status()
            reply = HeartbeatReply.model_validate_json(r.content)
            for launch in reply.desired:
                running.setdefault(launch.job_id, JobStatus(job_id=launch.job_id, state="running", pid=4242,
                                                            started_at=time.time(), run=launch.run))
            await asyncio.sleep(gap)


async def beat_all(url: str, tokens: list[str], warmup: float, seconds: float, gap: float) -> list[float]:
    now = time.monotonic()
    until = [now + warmup + seconds, now + warmup]
    latencies: list[float] = []
    await asyncio.gather(*(node(url, f"hb{i:04d}", t, until, latencies, gap) for i, t in enumerate(tokens)))
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--gap", type=float, default=0.0, help="seconds each node waits between heartbeats")
    parser.add_argument("--db", default=PG, help="a PostgreSQL URL (a schema of its own is used), or `sqlite`")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        db = None if args.db == "sqlite" else stack.enter_context(pg_schema(args.db))
        url, admin, _ = stack.enter_context(server(db))
        tokens, user = setup(url, admin, args.nodes)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {user}"}, timeout=60) as c:
            for _ in tokens:  # one job of 8 GPUs per node, for as long as the run lasts
                c.post("/api/v1/jobs", json={"command": ["sleep", "3600"], "gpus": 8, "workdir": "/tmp"})
        cpu: list[float] = []

        async def run() -> list[float]:
            task = asyncio.create_task(beat_all(url, tokens, args.warmup, args.seconds, args.gap))
            await asyncio.sleep(args.warmup)
            cpu.append(server_usage(url)[0])
            latencies = await task
            cpu.append(server_usage(url)[0])
            return latencies

        latencies = sorted(asyncio.run(run()))
    count = len(latencies)
    pace = f"{args.gap:g} s apart" if args.gap else "back to back"
    print(f"{args.nodes} nodes, each running one job, heartbeats {pace} for {args.seconds:g} s, "
          f"{'PostgreSQL' if db else 'SQLite'}")
    print(f"  heartbeats answered    {count / args.seconds:.0f}/s")
    print(f"  latency p50 / p99      {statistics.median(latencies) * 1000:.0f} / "
          f"{latencies[int(0.99 * (count - 1))] * 1000:.0f} ms")
    print(f"  server CPU             {(cpu[1] - cpu[0]) * 1000 / max(count, 1):.2f} ms per heartbeat "
          f"({(cpu[1] - cpu[0]) / args.seconds:.2f} cores)")


if __name__ == "__main__":
    main()
