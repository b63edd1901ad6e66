"""Server time to draw the cluster grid for 100 nodes × 8 GPUs (target: under 300 ms), and its neighbours.

`--nodes N` builds N nodes instead (the target is for 100).

Builds a migrated database (SQLite in a temporary directory, or `--db URL`) with 100 nodes of 8 GPUs, each GPU
with a fresh reading, ~80 % of them held by ~500 running jobs of 40 users in 8 labs (some idle, some flagged),
a few GPUs used outside nanum, and 2,000 pending jobs; then times, through the real app in process (httpx over
ASGI, so routing, session check, queries, templates and response included):

- `GET /` (the Cluster page), `GET /ui/cluster.json` (its live data), `GET /queue`, `GET /nodes`, `GET /labs`,
  `GET /metrics`.

Prints the median and p95 milliseconds of each over `--repeat` requests, each building its reads anew (none
shared, `Caches.shared`). `--finished N` adds a history of N finished jobs first: `/metrics` counts every job at its
first scrape and then only the jobs written since (`nanum.server.jobtally`); the first scrape is printed apart.
`--viewers 1 10 50` then keeps that many Cluster pages open, each asking for its live data every 2.5 s as the
page does, and prints the server's CPU (in process: this script's) while they are open.

    .venv/bin/python benchmarks/dashboard.py [--repeat 20] [--db postgresql+psycopg://postgres@127.0.0.1/test]
    .venv/bin/python benchmarks/dashboard.py --nodes 1000 --viewers 1 10 50 --db postgresql+psycopg://...
    .venv/bin/python benchmarks/dashboard.py --finished 200000 --db postgresql+psycopg://...
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select, text

from nanum.protocol import GpuInfo, NodeInfo
from nanum.server.app import create_app
from nanum.server.context import ServerContext
from nanum.server.schemas import UserIn
from nanum.server.services import accounts
from nanum.server.settings import ServerSettings
from nanum.store import AllocationRow, Database, JobRow, JobStatsRow, NodeLiveRow, NodeRow, UserRow, upgrade

NODES, GPUS, LABS, USERS, PENDING = 100, 8, 8, 40, 2000
TARGET_MS = 300.0


def build(ctx: ServerContext, rnd: random.Random, count: int = NODES, first_id: int = 0) -> str:
    """Fill the database, its jobs' ids after `first_id`; returns the admin's token."""
    token = accounts.create_user(ctx, UserIn(name="admin", labs=["lab0"], admin=True))
    for u in range(USERS):
        accounts.create_user(ctx, UserIn(name=f"user{u:02d}", labs=[f"lab{u % LABS}"]))
    now = time.time()
    with ctx.db.write() as s:
        users = {
            name: (uid, lab) for name, uid, lab in s.execute(select(UserRow.name, UserRow.id, UserRow.default_lab_id))
        }
        nodes = [_node(s, i, now) for i in range(count)]
        s.flush()
        job_id = first_id
        for node in nodes:
            gpu = 0
            while gpu < GPUS:
                size = rnd.choice((1, 1, 2, 2, 4))
                if gpu + size > GPUS or rnd.random() < 0.2:
                    gpu += 1
                    continue
                job_id += 1
                _job(s, rnd, job_id, users, node, list(range(gpu, gpu + size)), now)
                gpu += size
            _live(s, rnd, node, now)
        for _ in range(PENDING):
            job_id += 1
            user = rnd.choice(list(users))
            s.add(_row(job_id, users[user], rnd.choice((1, 2, 4, 8)), "pending", now - rnd.uniform(0, 86400)))
    return token


def add_finished(ctx: ServerContext, count: int) -> None:
    """`count` finished jobs with ids 1 to `count` (a history before the jobs of `build`, which come after it):
    copies of the first running job's row that waited 0 to 5,000 s and completed."""
    columns = [c.name for c in JobRow.__table__.columns if c.name != "rev"]
    values = {"id": "g", "state": "'completed'", "start_time": "submit_time + (g % 5000)",
              "end_time": "submit_time + 6000", "exit_code": "0"}
    chosen = ", ".join(values.get(c, c) for c in columns)
    series = ("generate_series(1, :n) AS s(g)" if not ctx.db.is_sqlite else
              "(WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :n) SELECT g FROM s)")
    with ctx.db.write() as s:
        s.execute(text(f"INSERT INTO jobs ({', '.join(columns)}) SELECT {chosen} FROM "
                       f"(SELECT * FROM jobs WHERE state = 'running' ORDER BY id LIMIT 1) AS j, {series}"),
                  {"n": count})


def _node(s: Any, i: int, now: float) -> NodeRow:
    gpus = [GpuInfo(index=g, uuid=f"GPU-{i}-{g}", model="A100", memory_mb=81920) for g in range(GPUS)]
    info = NodeInfo(name=f"gpu-{i:03d}", hostname=f"gpu-{i:03d}", gpus=gpus, cpus=128, memory_mb=1_048_576,
                    unix_user="root")  # fmt: skip
    node = NodeRow(name=info.name, state="up", last_seen=now, desired_version=0, created=now,
                   inventory=info.model_dump(exclude={"name"}), hostname=info.hostname)  # fmt: skip
    s.add(node)
    return node


def _row(job_id: int, user: tuple[int, int], gpus: int, state: str, t: float) -> JobRow:
    return JobRow(id=job_id, name=f"train-{job_id}", user_id=user[0], lab_id=user[1], command=["python", "train.py"],
                  workdir="/data", env={}, gpus=gpus, nodes=1, cpus=4, priority=0, kind="batch", preemptible=True,
                  state=state, borrowing=False, allocation=[], submit_time=t, runs=1 if state == "running" else 0,
                  attained_gpu_seconds=0.0, start_time=t if state == "running" else None,
                  reason=None if state == "running" else "waiting for GPUs", reason_code="queued")  # fmt: skip


def _job(s: Any, rnd: random.Random, job_id: int, users: dict[str, Any], node: NodeRow, gpus: list[int],
         now: float) -> None:  # fmt: skip
    user = users[rnd.choice([u for u in users if u != "admin"])]
    row = _row(job_id, user, len(gpus), "running", now - rnd.uniform(60, 86400))
    row.allocation = [{"node": node.name, "gpus": gpus}]
    s.add(row)
    s.flush()
    s.add_all(AllocationRow(job_id=job_id, node_id=node.id, gpu_index=g) for g in gpus)
    stage = rnd.choices(("active", "idle", "flagged"), (8, 1, 1))[0]
    s.add(JobStatsRow(job_id=job_id, readings=100, util_sum=7000.0, util_peak=99.0, memory_sum=3e6, memory_peak=40000,
                      cpu_sum=1000.0, idle=5, idle_stage=stage, idle_since=now - 3600 if stage != "active" else None,
                      util_now=rnd.uniform(0, 100), marks={}))  # fmt: skip


def _live(s: Any, rnd: random.Random, node: NodeRow, now: float) -> None:
    gpus, rogue = [], []
    for g in range(GPUS):
        procs = []
        if rnd.random() < 0.01:
            procs.append({"pid": rnd.randint(1000, 99999), "memory_mb": 2048, "user": "mallory", "command": "python x"})
            rogue.append(g)
        gpus.append({"index": g, "util": round(rnd.uniform(0, 100), 1), "memory_mb": rnd.randint(0, 81920),
                     "power_w": 250.0, "temperature_c": 60.0, "processes": procs})  # fmt: skip
    s.add(NodeLiveRow(node_id=node.id, time=now, gpus=gpus, jobs=[], rogue=rogue))


async def measure(app: Any, cookie: str, path: str, repeat: int, warm: int = 2) -> list[float]:
    transport = httpx.ASGITransport(app=app)
    times = []
    async with httpx.AsyncClient(transport=transport, base_url="http://bench", headers={"Cookie": cookie}) as client:
        for _ in range(repeat + warm):
            app.state.ctx.caches.views.clear()  # each request builds its view (`services.cluster.shared`)
            began = time.perf_counter()
            response = await client.get(path)
            times.append((time.perf_counter() - began) * 1000)
            assert response.status_code == 200, (path, response.status_code, response.text[:200])
    return times[warm:]  # the first requests warm caches


async def viewers(app: Any, cookie: str, count: int, seconds: float) -> tuple[int, float]:
    """`count` Cluster pages open for `seconds`, each asking for its live data every 2.5 s as the page does (their
    first asks spread over the first 2.5 s). Returns the requests answered and the server's CPU seconds."""
    async def viewer(client: httpx.AsyncClient, first: float, until: float) -> int:
        await asyncio.sleep(first)
        answered = 0
        while time.monotonic() < until:
            # as sent (gzipped, as to a browser): this process's CPU is counted as the server's
            async with client.stream("GET", "/ui/cluster.json", headers={"Accept-Encoding": "gzip"}) as response:
                assert response.status_code == 200, response.status_code
                async for _ in response.aiter_raw():
                    pass
            answered += 1
            await asyncio.sleep(2.5)
        return answered

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench", headers={"Cookie": cookie}) as client:
        app.state.ctx.caches.views.clear()
        began, until = time.process_time(), time.monotonic() + seconds
        answered = await asyncio.gather(*(viewer(client, 2.5 * i / count, until) for i in range(count)))
        return sum(answered), time.process_time() - began


async def login(app: Any, token: str) -> str:
    from nanum.server.web import session

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench") as client:
        form = await client.get("/login")
        nonce = form.cookies["nanum_login"]
        r = await client.post(
            "/login", data={"token": token, "nonce": nonce}, headers={"Cookie": f"nanum_login={nonce}"}
        )
        return f"{session.COOKIE}={r.cookies[session.COOKIE]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=NODES, help=f"nodes of {GPUS} GPUs (default {NODES})")
    parser.add_argument("--db", help="database URL (default: SQLite in a temporary directory)")
    parser.add_argument("--viewers", type=int, nargs="*", default=[], metavar="N",
                        help="then keep N Cluster pages open (each N in turn) and print the server's CPU")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the pages of --viewers stay open")
    parser.add_argument("--finished", type=int, default=0, metavar="N", help="a history of N finished jobs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = ServerSettings(home=Path(tmp), db_url=args.db)
        db = Database(settings.database_url)
        upgrade(db)
        ctx = ServerContext.create(settings, db)
        token = build(ctx, random.Random(7), args.nodes, first_id=args.finished)
        if args.finished:
            add_finished(ctx, args.finished)
        if not db.is_sqlite:  # the jobs were given their ids here; and the planner its statistics, as autovacuum would
            with db.engine.connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                conn.execute(text("SELECT setval(pg_get_serial_sequence('jobs', 'id'), (SELECT max(id) FROM jobs))"))
                conn.execute(text("ANALYZE"))
        app = create_app(ctx, run_scheduler=False)
        cookie = asyncio.run(login(app, token))
        print(f"{args.nodes} nodes × {GPUS} GPUs, {PENDING} pending jobs, {args.finished:,} finished ones, "
              f"{'SQLite' if db.is_sqlite else 'PostgreSQL'}")
        first = asyncio.run(measure(app, cookie, "/metrics", 1, warm=0))[0]
        print(f"GET /metrics, the first  {first:6.1f} ms (counts every job)")
        for path in ("/", "/ui/cluster.json", "/queue", "/nodes", "/labs", "/metrics"):
            times = asyncio.run(measure(app, cookie, path, args.repeat))
            median, p95 = statistics.median(times), sorted(times)[int(0.95 * (len(times) - 1))]
            note = (
                f"  (target < {TARGET_MS:.0f} ms: {'met' if median < TARGET_MS else 'MISSED'})" if path == "/" else ""
            )
            print(f"GET {path:<18} median {median:6.1f} ms   p95 {p95:6.1f} ms{note}")
        for count in args.viewers:
            answered, cpu = asyncio.run(viewers(app, cookie, count, args.seconds))
            print(f"{count:3d} Cluster pages open for {args.seconds:.0f} s: {answered} live updates, "
                  f"{cpu / args.seconds:.2f} cores of server CPU")
        db.dispose()


if __name__ == "__main__":
    main()
