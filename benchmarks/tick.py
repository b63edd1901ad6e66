"""What one scheduling tick costs the server on a big, busy fleet, without agents or HTTP: the server's own
services in this process, on PostgreSQL (or SQLite).

    .venv/bin/python benchmarks/tick.py                          # 1,000 nodes x 8 GPUs, every GPU busy
    .venv/bin/python benchmarks/tick.py --nodes 300 --db sqlite

It registers the nodes and has each report its GPUs (real heartbeats through the agent service), submits enough
one-GPU jobs to fill every GPU plus a queue (`--queued`), lets the first ticks start them and the nodes report
them running. Then, `--ticks` times: `--churn` running jobs end (their nodes report the exits, as heartbeats do)
and one tick runs, which starts as many queued jobs. Printed: the tick's time (median, p90) and, with
`--profile`, where it goes (cProfile, cumulative).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from load import pg_schema
from scale import PG
from sqlalchemy import select

from nanum.protocol import GpuInfo, Heartbeat, JobStatus, NodeInfo
from nanum.server.callers import Caller, NodeCaller
from nanum.server.context import ServerContext
from nanum.server.job_schemas import JobSubmit
from nanum.server.limits import MAX_ARRAY_TASKS
from nanum.server.scheduler import Scheduler
from nanum.server.schemas import UserIn
from nanum.server.services import accounts, agent, jobs
from nanum.server.settings import ServerSettings
from nanum.store import Database, NodeRow, UserRow, upgrade


def info(name: str, gpus: int) -> NodeInfo:
    return NodeInfo(name=name, hostname=name, cpus=64, memory_mb=512_000, simulated=True, unix_user="nanum",
                    gpus=[GpuInfo(index=i, uuid=f"GPU-{name}-{i}", model="A100", memory_mb=81920) for i in range(gpus)])


class Fleet:
    def __init__(self, ctx: ServerContext, nodes: int, gpus: int) -> None:
        self.ctx = ctx
        self.infos = {f"n{i:04d}": info(f"n{i:04d}", gpus) for i in range(nodes)}
        self.callers: dict[str, NodeCaller] = {}
        for name in self.infos:
            accounts.add_node(ctx, name)
        with ctx.db.read() as s:
            for node_id, name in s.execute(select(NodeRow.id, NodeRow.name)):
                self.callers[name] = NodeCaller(node_id, name)
        #: job ids each node runs
        self.running: dict[str, set[int]] = {name: set() for name in self.infos}

    def beat(self, name: str, exited: tuple[int, ...] = ()) -> None:
        now = time.time()
        statuses = [JobStatus(job_id=j, state="running", pid=1000 + j, started_at=now) for j in self.running[name]]
        statuses += [JobStatus(job_id=j, state="exited", exit_code=0, ended_at=now) for j in exited]
        out = agent.heartbeat(self.ctx, self.callers[name], Heartbeat(node=self.infos[name], jobs=statuses))
        held = {d.job_id for d in out.reply.desired}
        self.running[name] = held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--queued", type=int, default=2000, help="jobs waiting beyond the full fleet")
    parser.add_argument("--ticks", type=int, default=30)
    parser.add_argument("--churn", type=int, default=20, help="running jobs that end before each tick")
    parser.add_argument("--db", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with services(args.db) as (ctx, caller):
        run(args, ctx, caller)


@contextlib.contextmanager
def services(db: str) -> Iterator[tuple[ServerContext, Caller]]:
    """The server's services over a fresh database (`postgres`: a schema of its own, dropped afterwards; `sqlite`),
    and a user, bench, in lab fleet."""
    with tempfile.TemporaryDirectory(prefix="nanum-bench-") as tmp, contextlib.ExitStack() as stack:
        url = stack.enter_context(pg_schema(PG)) if db == "postgres" else f"sqlite:///{tmp}/nanum.db"
        database = Database(url)
        upgrade(database)
        ctx = ServerContext.create(ServerSettings(home=Path(tmp) / "home"), database)
        accounts.create_user(ctx, UserIn(name="bench", labs=["fleet"], unix_user="nobody"), "bench-token")
        with ctx.db.read() as s:
            caller = accounts.caller_for(s, s.scalars(select(UserRow).where(UserRow.name == "bench")).one())
        yield ctx, caller
        database.dispose()


def run(args: argparse.Namespace, ctx: ServerContext, caller: Caller) -> None:
    began = time.perf_counter()
    fleet = Fleet(ctx, args.nodes, args.gpus)
    for name in fleet.infos:
        fleet.beat(name)
    total = args.nodes * args.gpus + args.queued + args.ticks * args.churn
    for first in range(0, total, MAX_ARRAY_TASKS):
        last = min(total, first + MAX_ARRAY_TASKS) - 1
        jobs.submit(ctx, caller, JobSubmit(command=["true"], gpus=1, cpus=0, workdir="/tmp", array=f"{first}-{last}"))
    sched = Scheduler(ctx)
    sched.tick()
    for _ in range(2):  # each node learns its jobs, then reports them running (their pids), as agents do
        for name in fleet.infos:
            fleet.beat(name)
    sched.tick()
    running = sum(len(held) for held in fleet.running.values())
    assert running == args.nodes * args.gpus, f"{running} jobs run, not one on every GPU"
    print(f"set up {args.nodes} nodes x {args.gpus} GPUs, {total} jobs in {time.perf_counter() - began:.0f} s",
          flush=True)
    times: list[float] = []
    profile = cProfile.Profile() if args.profile else None
    names = list(fleet.infos)
    turn = 0
    for _ in range(args.ticks):
        ending, touched = 0, set()
        while ending < args.churn:
            name = names[turn % len(names)]
            turn += 1
            if fleet.running[name]:
                job_id = min(fleet.running[name])
                fleet.running[name].discard(job_id)
                fleet.beat(name, (job_id,))
                touched.add(name)
                ending += 1
        if profile:
            profile.enable()
        result = sched.tick()
        if profile:
            profile.disable()
        assert result is not None
        times.append(result.seconds)
        for name in touched:
            fleet.beat(name)  # the nodes that got new jobs report them running
    times.sort()
    print(f"tick with {args.churn} ends: median {statistics.median(times) * 1000:.1f} ms, "
          f"p90 {times[int(0.9 * (len(times) - 1))] * 1000:.1f} ms over {len(times)} ticks")
    if profile:
        stats = pstats.Stats(profile)
        stats.sort_stats("cumulative").print_stats(40)
        stats.sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
