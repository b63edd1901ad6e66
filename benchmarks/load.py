"""Submissions under load: a real `nanum server` process, many concurrent clients, and a count of lost jobs.

    .venv/bin/python benchmarks/load.py                          # 1,000/s offered for 60 s, 50 clients, SQLite
    .venv/bin/python benchmarks/load.py --db postgresql+psycopg://postgres@127.0.0.1:5432/test
    .venv/bin/python benchmarks/load.py --rate 200 --duration 3 --clients 8 --nodes 2   # a quick run

The server starts in a throw-away directory (on PostgreSQL, in a schema of its own, dropped afterwards). `--users`
users share the `--clients` clients (one HTTP connection each). Submissions are offered open-loop: the k-th is due
at k / rate seconds, and the next free client sends it; a client that finds itself behind sends at once, and
nothing is sent after the end, so the achieved rate shows when the server (or this process) cannot keep up.
With `--nodes N`, N simulated nodes of 8 GPUs each send real heartbeats (held for up to 2 s) and run each job they
are given for `--job-s` seconds; without nodes every job stays pending (the scheduler still looks at each).

Printed: offered and accepted submissions per second, latency (send to reply) p50/p99/max, errors by kind
(target 0), and jobs lost: acknowledged with 201 but not in the database afterwards (must be 0; read straight
from the database, not through the API). Traffic goes only to 127.0.0.1; every loop is bounded by the duration.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

from nanum.protocol import GpuInfo, Heartbeat, HeartbeatReply, JobStatus, NodeInfo

HOST = "127.0.0.1"


@dataclass
class Results:
    latencies: list[float] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    sent: int = 0
    began: float = 0.0
    last_reply: float = 0.0
    late_s: float = 0.0  # how far behind schedule the last submission was sent

    def error(self, kind: str, example: str) -> None:
        self.errors[kind] += 1
        self.examples.setdefault(kind, example[:300])


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(its own, its reaped children's) CPU seconds of process `pid`, user and system, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def machine_seconds() -> tuple[float, float, float]:
    """(busy, waiting for I/O, all) CPU seconds of the whole machine since boot."""
    user, nice, system, idle, iowait, irq, softirq, steal = (
        int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9])
    tick = os.sysconf("SC_CLK_TCK")
    busy = user + nice + system + irq + softirq + steal
    return busy / tick, iowait / tick, (busy + idle + iowait) / tick


def stamped(stamp: Path) -> float:
    """The time a job wrote into `stamp` with `date +%s.%N` as its first instruction, once it has (polled)."""
    while not stamp.exists() or not stamp.read_text().strip():
        time.sleep(0.001)
    return float(stamp.read_text())


def interpreter() -> str:
    """The Python nanum runs on here, for a run's header: builds differ in speed (docs/performance.md)."""
    return f"Python {platform.python_version()} at {os.path.realpath(sys.executable)}"


def nanum_exe() -> list[str]:
    exe = Path(sys.executable).with_name("nanum")
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from nanum.cli import main; main()"]


@contextlib.contextmanager
def pg_schema(url: str) -> Iterator[str]:
    """A fresh schema in the PostgreSQL database at `url`; yields the URL that uses it. Dropped afterwards."""
    schema = f"nanum_load_{os.getpid()}_{secrets.token_hex(3)}"
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options=-csearch_path%3D{schema}"
    finally:
        with engine.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()


@contextlib.contextmanager
def server(db: str | None, *more: str, keep: Path | None = None) -> Iterator[tuple[str, str, str]]:
    """`nanum server [MORE]` on a free loopback port; yields (url, admin token, database URL). `keep`: a folder
    to copy the server's log into (as server.log) once it has stopped."""
    root = Path(tempfile.mkdtemp(prefix="nanum-load-"))
    home, port = root / "home", free_port()
    db_url = db or f"sqlite:///{home / 'nanum.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANUM_")}
    env.update(XDG_CONFIG_HOME=str(root / "config"), NANUM_HOME=str(home))
    argv = [*nanum_exe(), "server", "--home", str(home), "--host", HOST, "--port", str(port), "--db", db_url, *more]
    log = root / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://{HOST}:{port}"
    try:
        yield url, wait_until_up(url, home / "admin-token", proc, log), db_url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        said = log.read_text(errors="replace")
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / "server.log").write_text(said)
        if "Traceback" in said or "ERROR" in said:
            print(f"--- the server's output (end):\n{said[-3000:]}", file=sys.stderr)
        shutil.rmtree(root, ignore_errors=True)


def wait_until_up(url: str, token_file: Path, proc: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"`nanum server` exited:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError, OSError):
            if token_file.exists() and httpx.get(f"{url}/api/v1/health", timeout=1).status_code == 200:
                return token_file.read_text().strip()
        time.sleep(0.1)
    sys.exit(f"`nanum server` did not come up in 60 s:\n{log.read_text()[-3000:]}")


def setup(url: str, admin: str, users: int, nodes: int) -> tuple[list[str], list[tuple[str, str]]]:
    """Users in two labs (tokens), and registered nodes (name, token)."""
    headers = {"Authorization": f"Bearer {admin}"}
    tokens, registered = [], []
    with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
        for i in range(users):
            r = c.post("/api/v1/users", json={"name": f"load{i}", "labs": [f"lab{i % 2}"]})
            r.raise_for_status()
            tokens.append(r.json()["token"])
        for i in range(nodes):
            r = c.post("/api/v1/nodes", json={"name": f"sim{i:02d}"})
            r.raise_for_status()
            registered.append((f"sim{i:02d}", r.json()["token"]))
    return tokens, registered


async def submitter(
    url: str, token: str, serial: Iterator[int], start: float, rate: float, end: float, res: Results
) -> None:
    """Send the submissions this client takes from `serial`, each at its due time, until `end`."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
        for k in serial:
            due = start + k / rate
            if due >= end or time.monotonic() >= end:
                return  # what was not sent by the end was offered but not taken
            if (wait := due - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            res.late_s = max(res.late_s, time.monotonic() - due)
            body = {"command": ["sleep", "1"], "gpus": 1, "name": f"load-{k}"}
            sent = time.monotonic()
            res.sent += 1
            try:
                r = await client.post("/api/v1/jobs", json=body)
            except httpx.HTTPError as exc:
                res.error(type(exc).__name__, repr(exc))
                continue
            res.last_reply = time.monotonic()
            res.latencies.append(res.last_reply - sent)
            if r.status_code == 201:
                res.accepted.append(int(r.json()["id"]))
            else:
                res.error(f"HTTP {r.status_code}", r.text)


async def sim_node(url: str, name: str, token: str, job_s: float, end: float, res: Results) -> None:
    """A node of 8 simulated GPUs speaking the agent protocol: runs each job it is given for `job_s` seconds."""
    gpus = [GpuInfo(index=i, uuid=f"GPU-{name}-{i}", model="A100", memory_mb=81920) for i in range(8)]
    info = NodeInfo(name=name, hostname=name, gpus=gpus, cpus=64, memory_mb=512_000, simulated=True, unix_user="x")
    running: dict[int, float] = {}
    exited: dict[int, JobStatus] = {}
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        while time.monotonic() < end:
            now = time.monotonic()
            for job_id, started in list(running.items()):
                if now - started >= job_s:
                    del running[job_id]
                    exited[job_id] = JobStatus(job_id=job_id, state="exited", exit_code=0, ended_at=time.time())
            statuses = [JobStatus(job_id=j, state="running", pid=j) for j in running] + list(exited.values())
            wait = 0.0 if running else min(2.0, max(end - now, 0.0))
            beat = Heartbeat(node=info, jobs=statuses, wait_s=wait)
            try:
                r = await client.post("/api/v1/agent/heartbeat", content=beat.model_dump_json())
            except httpx.HTTPError as exc:
                res.error(f"heartbeat {type(exc).__name__}", repr(exc))
                await asyncio.sleep(0.5)
                continue
            if r.status_code != 200:
                res.error(f"heartbeat HTTP {r.status_code}", r.text)
                await asyncio.sleep(0.5)
                continue
            reply = HeartbeatReply.model_validate_json(r.content)
            for job_id in reply.ack:
                exited.pop(job_id, None)
            desired = {d.job_id for d in reply.desired}
            for job_id in list(running):
                if job_id not in desired:
                    del running[job_id]
                    exited[job_id] = JobStatus(job_id=job_id, state="exited", exit_code=143, signal=15)
            for job_id in desired - running.keys() - exited.keys():
                running[job_id] = time.monotonic()
            if running:
                await asyncio.sleep(min(0.25, job_s))


async def offer(url: str, tokens: list[str], nodes: list[tuple[str, str]], args: argparse.Namespace) -> Results:
    res = Results()
    start = res.began = time.monotonic() + 0.2
    end = start + args.duration
    serial = iter(range(10**9))
    tasks = [submitter(url, tokens[i % len(tokens)], serial, start, args.rate, end, res) for i in range(args.clients)]
    tasks += [sim_node(url, name, token, args.job_s, end, res) for name, token in nodes]
    await asyncio.gather(*tasks)
    return res


def stored_ids(db_url: str) -> set[int]:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return {int(i) for (i,) in conn.execute(text("SELECT id FROM jobs"))}
    finally:
        engine.dispose()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=1000.0, help="submissions offered per second (default 1000)")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load (default 60)")
    ap.add_argument("--clients", type=int, default=50, help="concurrent clients (default 50)")
    ap.add_argument("--users", type=int, default=10, help="users the clients act as (default 10)")
    ap.add_argument("--nodes", type=int, default=0, help="simulated nodes of 8 GPUs (default: none)")
    ap.add_argument("--job-s", type=float, default=1.0, help="how long a simulated job runs (default 1 s)")
    ap.add_argument("--db", help="database URL (default: SQLite in a fresh directory); PostgreSQL gets a new schema")
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        db = stack.enter_context(pg_schema(args.db)) if args.db and args.db.startswith("postgresql") else args.db
        url, admin, db_url = stack.enter_context(server(db))
        tokens, nodes = setup(url, admin, args.users, args.nodes)
        res = asyncio.run(offer(url, tokens, nodes, args))
        took = max(res.last_reply - res.began, 1e-9)
        lost = sorted(set(res.accepted) - stored_ids(db_url))
    backend = "PostgreSQL" if db_url.startswith("postgresql") else "SQLite"
    print(f"{backend}: offered {args.rate:.0f}/s for {args.duration:.0f} s from {args.clients} clients "
          f"({args.users} users, {args.nodes} simulated nodes)")
    offered = int(args.rate * args.duration)
    print(f"  sent {res.sent} of {offered} offered ({res.sent / took:.0f}/s; up to {res.late_s:.2f} s behind schedule)")
    print(f"  accepted {len(res.accepted)} ({len(res.accepted) / took:.0f}/s)")
    lat = [x * 1000 for x in res.latencies]
    print(f"  latency p50 {percentile(lat, 0.5):.1f} ms, p99 {percentile(lat, 0.99):.1f} ms, "
          f"max {max(lat, default=float('nan')):.1f} ms")
    print(f"  errors {sum(res.errors.values())}" + "".join(f"\n    {k} x{n}: {res.examples[k]}"
                                                         for k, n in res.errors.most_common()))
    print(f"  jobs lost {len(lost)}" + (f": {lost[:20]}" if lost else ""))
    if res.errors or lost:
        sys.exit(1)


if __name__ == "__main__":
    main()
