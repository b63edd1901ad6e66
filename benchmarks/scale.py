"""A fleet against one server: N simulated nodes (`nanum agent --simulate-nodes`, each its own HTTP client, token
and heartbeats) and a stream of submissions, on PostgreSQL.

    .venv/bin/python benchmarks/scale.py                                   # 1,000 nodes x 8 GPUs, 20,000 jobs at 100/s
    .venv/bin/python benchmarks/scale.py --nodes 100 --jobs 2000 --rate 50  # a quick run
    .venv/bin/python benchmarks/scale.py --db sqlite                        # SQLite instead

Each node reads its GPUs every `--sample-interval` seconds (5, a real agent's default) and sends the readings
with its heartbeats, as real agents do. Jobs ask for 1, 2, 4 or 8 GPUs and run `sleep S`, with S drawn around a
mean that keeps about 70 % of the fleet's GPUs busy at the offered rate (for the defaults, 8 to 24 s), so every
job can start. Printed beside the targets:
the scheduling cycle (median and p99, from the server's `nanum_scheduler_cycle_seconds` histogram, interpolated
within buckets as Prometheus does), submit latency (p50, p99), heartbeats handled per second, errors, whether every
job started, how long jobs waited from submission to start (p50, p99: with 70 % of the GPUs busy some queueing is
expected, an 8-GPU job waits for a whole node), the server's CPU time and peak memory, and the CPU the simulated
fleet's process and this submitting client took beside it (all share the machine), PostgreSQL's CPU (this
machine's `postgres` processes, for a database that runs here), the server's and PostgreSQL's CPU per job
submitted, and how busy the whole machine was (near 100 %, the run is bound by CPU, and latency is queueing
for it); then the submissions accepted
a second and their p99 by 5-second window, which show when in the run the latency came (and, where heartbeats
failed, the seconds they failed in). `--keep DIR` keeps the server's log and the fleet's output for a closer look.
Targets: no errors, every job started, API p99 < 200 ms, cycle p99 < 500 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
# the benchmarks' shared helpers
from load import cpu_seconds, interpreter, machine_seconds, nanum_exe, pg_schema, server

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def register(url: str, admin: str, nodes: int, tokens: Path) -> str:
    """Register the nodes (their tokens into `tokens`, mode 0600) and one user; returns the user's token."""
    lines = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=60) as c:
        for i in range(nodes):
            r = c.post("/api/v1/nodes", json={"name": f"sim{i:04d}"})
            r.raise_for_status()
            lines.append(f"sim{i:04d} {r.json()['token']}\n")
        r = c.post("/api/v1/users", json={"name": "scale", "labs": ["fleet"], "unix_user": "nobody"})
        r.raise_for_status()
    tokens.write_text("".join(lines))
    tokens.chmod(0o600)
    return str(r.json()["token"])


def wait_nodes(url: str, admin: str, count: int, timeout: float) -> float:
    began = time.monotonic()
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=60) as c:
        while sum(n["state"] == "up" for n in c.get("/api/v1/nodes").json()) < count:
            if time.monotonic() - began > timeout:
                sys.exit(f"only some of the {count} nodes came up in {timeout:.0f} s")
            time.sleep(1)
    return time.monotonic() - began


GPU_CHOICES = (1, 1, 2, 4, 8)


def mean_run_s(gpus: int, rate: float, busy: float = 0.7) -> float:
    """The mean run time at which jobs arriving at `rate` keep `busy` of `gpus` GPUs in use."""
    return busy * gpus / (rate * statistics.mean(GPU_CHOICES))


async def submit_all(url: str, token: str, jobs: int, rate: float, clients: int,
                     mean_s: float) -> tuple[list[tuple[float, float]], list[int], int]:
    """Open-loop submissions: the k-th is due at k / rate; returns (when each was sent, counted from the first
    one's due time, and its latency), job ids and errors."""
    rng = random.Random(7)
    bodies = [{"command": ["sleep", f"{rng.uniform(0.5 * mean_s, 1.5 * mean_s):.1f}"],
               "gpus": rng.choice(GPU_CHOICES), "workdir": "/tmp", "time_limit_s": 600} for _ in range(jobs)]
    latencies: list[tuple[float, float]] = []
    ids: list[int] = []
    errors = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for k in range(jobs):
        queue.put_nowait(k)
    began = time.monotonic()

    async def client() -> None:
        nonlocal errors
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
            while not queue.empty():
                k = queue.get_nowait()
                delay = began + k / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                sent = time.monotonic()
                try:
                    r = await c.post("/api/v1/jobs", json=bodies[k])
                except httpx.HTTPError:
                    errors += 1
                    continue
                latencies.append((sent - began, time.monotonic() - sent))
                if r.status_code == 201:
                    ids.append(int(r.json()["id"]))
                else:
                    errors += 1

    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, ids, errors


def timeline(latencies: list[tuple[float, float]], width: int = 5) -> list[str]:
    """Submissions accepted a second and their p99, by `width`-second window of when they were sent. Overload
    comes in stretches (a wave of ends, a rollup): where one falls says what to look for in the server's log
    (`--keep`)."""
    windows: dict[int, list[float]] = {}
    for sent, latency in latencies:
        windows.setdefault(int(sent // width), []).append(latency)
    got = [sorted(windows.get(w, [])) for w in range(max(windows, default=-1) + 1)]
    return [f"by {width}-second window from the first submission:",
            "  accepted/s " + " ".join(f"{len(g) / width:.0f}" for g in got),
            "  p99 (ms)   " + " ".join(f"{g[int(0.99 * (len(g) - 1))] * 1000:.0f}" if g else "-" for g in got)]


def error_seconds(lines: list[str], wall: float) -> list[tuple[int, int]]:
    """(seconds after `wall`, errors logged in that second) of the fleet's timestamped error lines, the busiest
    seconds first."""
    seconds: Counter[int] = Counter()
    for line in lines:
        with contextlib.suppress(ValueError):
            seconds[int(datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S").timestamp() - wall)] += 1
    return seconds.most_common()


def cycle_quantiles(url: str) -> tuple[float | None, float | None, int]:
    """p50 and p99 of the scheduling cycle from the server's histogram, and how many cycles it counts."""
    text = httpx.get(f"{url}/metrics", timeout=60).text
    buckets = [(float("inf") if le == "+Inf" else float(le), float(v)) for le, v in
               re.findall(r'nanum_scheduler_cycle_seconds_bucket\{le="([^"]+)"\} ([0-9.e+]+)', text)]
    total = buckets[-1][1] if buckets else 0.0

    def quantile(q: float) -> float | None:
        if not total:
            return None
        rank, lower, below = q * total, 0.0, 0.0
        for upper, count in buckets:
            if count >= rank:
                if upper == float("inf"):
                    return lower
                return lower + (upper - lower) * (rank - below) / max(count - below, 1e-9)
            lower, below = upper, count
        return lower

    return quantile(0.5), quantile(0.99), int(total)


def started_waits(url: str, token: str, ids: list[int]) -> list[float]:
    """How long each of `ids` that has started (running or ended after running) waited from its submission to its
    start, in seconds."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120) as c:
        jobs = c.get("/api/v1/jobs", params={"all": "true", "limit": 100_000}).json()
    wanted = set(ids)
    return [(datetime.fromisoformat(j["start_time"]) - datetime.fromisoformat(j["submit_time"])).total_seconds()
            for j in jobs if j["id"] in wanted and j.get("start_time")]


def server_usage(url: str) -> tuple[float, float]:
    """CPU seconds and peak resident memory (MiB) of the `nanum server` serving `url`'s port, its worker processes
    included (`--workers`): the sums over them."""
    cpu = peak = 0.0
    for pid in server_pids(url.rsplit(":", 1)[1]):
        cpu += cpu_seconds(pid)[0]
        peak += next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                     if line.startswith("VmHWM:")) / 1024
    return (cpu, peak) if cpu else (float("nan"), float("nan"))


def postgres_seconds() -> float:
    """CPU seconds of this machine's PostgreSQL: every `postgres` process's own, and what its ended children took
    (a backend that closed). Meaningful only where the database runs here, as with the default `--db`."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError):
                if (entry / "comm").read_text().startswith("postgres"):
                    total += sum(cpu_seconds(int(entry.name)))
    return total


def server_pids(port: str) -> list[int]:
    """The processes whose command line is `nanum server ... --port PORT` (read from /proc: no `ss` needed)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "server" in argv and any(a == "--port" and b == port for a, b in itertools.pairwise(argv)):
            found.append(int(entry.name))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--db", default=PG, help="a PostgreSQL URL (a schema of its own is used), or `sqlite`")
    parser.add_argument("--sample-interval", type=float, default=5.0, metavar="S",
                        help="seconds between each node's readings of its GPUs, as a real agent's default (0: none)")
    parser.add_argument("--workers", type=int, default=1,
                        help="serving server processes (`nanum server --workers`); above 1, one more schedules")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="keep the server's log and the fleet's output in DIR (server.log, fleet.log)")
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        db = None if args.db == "sqlite" else stack.enter_context(pg_schema(args.db))
        # One user submits every job: the cap on a user's jobs (20,000 by default) must not cut a larger --jobs.
        url, admin, _ = stack.enter_context(server(db, "--workers", str(args.workers), "--max-jobs-per-user",
                                                   str(max(args.jobs, 20_000)), keep=args.keep))
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nanum-scale-")))
        began = time.monotonic()
        token = register(url, admin, args.nodes, root / "tokens")
        print(f"registered {args.nodes} nodes in {time.monotonic() - began:.1f} s", flush=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("NANUM_")}
        agents = subprocess.Popen([*nanum_exe(), "agent", "--server", url, "--simulate-nodes", str(args.nodes),
                                   "--simulate-gpus", str(args.gpus), "--token-file", str(root / "tokens"), "-q",
                                   "--sample-interval", str(args.sample_interval)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            up = wait_nodes(url, admin, args.nodes, timeout=300)
            print(f"{args.nodes} nodes up in {up:.1f} s", flush=True)
            cpu0, _ = server_usage(url)
            fleet0, own0 = cpu_seconds(agents.pid)[0], time.process_time()
            pg0, machine0 = postgres_seconds(), machine_seconds()
            began, wall = time.monotonic(), time.time()
            mean_s = mean_run_s(args.nodes * args.gpus, args.rate)
            latencies, ids, errors = asyncio.run(submit_all(url, token, args.jobs, args.rate, args.clients, mean_s))
            took = time.monotonic() - began
            deadline = time.monotonic() + 60
            while len(waits := started_waits(url, token, ids)) < len(ids) and time.monotonic() < deadline:
                time.sleep(2)
            started = len(waits)
            waits.sort()
            cpu1, peak = server_usage(url)
            fleet1, own1 = cpu_seconds(agents.pid)[0], time.process_time()
            pg1, machine1 = postgres_seconds(), machine_seconds()
            measured = time.monotonic() - began
            p50, p99, cycles = cycle_quantiles(url)
        finally:
            agents.send_signal(signal.SIGTERM)
            out = agents.communicate(timeout=120)[0].decode(errors="replace")
            if args.keep is not None:
                args.keep.mkdir(parents=True, exist_ok=True)
                (args.keep / "fleet.log").write_text(out)
        beats = re.search(r"(\d+) heartbeats in ([0-9.]+) s \(([0-9.]+)/s\), (\d+) failed", out)
        lat = sorted(latency for _, latency in latencies)
        busy = (machine1[0] - machine0[0]) / max(machine1[2] - machine0[2], 1e-9)
        per_job = 1000 / max(len(ids), 1)
        api50, api99 = statistics.median(lat), lat[int(0.99 * (len(lat) - 1))]
        print(f"\n{args.nodes} nodes x {args.gpus} GPUs, {args.jobs:,} jobs offered at {args.rate:g}/s "
              f"({len(ids):,} accepted in {took:.0f} s: {len(ids) / took:.1f}/s), {'PostgreSQL' if db else 'SQLite'}, "
              f"runs of {mean_s:.0f} s on average, "
              + (f"{args.workers} serving server processes and one scheduling" if args.workers > 1
                 else "1 server process") + f", {interpreter()}")
        rows = [
            ("scheduling cycle p50", f"{p50 * 1000:.0f} ms" if p50 is not None else "-", ""),
            ("scheduling cycle p99", f"{p99 * 1000:.0f} ms" if p99 is not None else "-", "< 500 ms"),
            ("cycles", f"{cycles:,}", ""),
            ("submit latency p50", f"{api50 * 1000:.0f} ms", ""),
            ("submit latency p99", f"{api99 * 1000:.0f} ms", "< 200 ms"),
            ("heartbeats handled", f"{beats.group(3)}/s ({beats.group(1)} in {beats.group(2)} s)" if beats else "?",
             ""),
            ("errors", f"{errors} submit, {beats.group(4) if beats else '?'} heartbeat", "0"),
            ("jobs started", f"{started:,} of {len(ids):,}", "all"),
            ("start wait p50 / p99", f"{statistics.median(waits):.2f} s / {waits[int(0.99 * (len(waits) - 1))]:.2f} s"
             if waits else "-", ""),
            ("server CPU", f"{cpu1 - cpu0:.0f} s over {measured:.0f} s ({(cpu1 - cpu0) / measured:.2f} cores)", ""),
            ("server peak memory", f"{peak:.0f} MiB", ""),
            ("fleet, client CPU",
             f"{(fleet1 - fleet0) / measured:.2f} cores, {(own1 - own0) / measured:.2f} cores", ""),
            ("PostgreSQL CPU", f"{(pg1 - pg0) / measured:.2f} cores" if db else "-", ""),
            ("CPU per job", f"server {(cpu1 - cpu0) * per_job:.1f} ms"
             + (f", PostgreSQL {(pg1 - pg0) * per_job:.1f} ms" if db else ""), ""),
            ("the machine", f"{busy:.0%} busy on {os.cpu_count()} cores", ""),
        ]
        for name, value, target in rows:
            print(f"  {name:<22} {value:<40} {('target ' + target) if target else ''}")
        if not beats:
            print(out[-3000:], file=sys.stderr)
        elif int(beats.group(4)):
            said = [line for line in out.splitlines() if "node sim" in line]
            kinds = Counter(re.sub(r"node sim\d+", "node simN", line.split(": ", 1)[-1])[:160] for line in said)
            print("  heartbeat errors by kind:", *(f"    {n} x {k}" for k, n in kinds.most_common(5)), sep="\n")
            print("  heartbeat errors by second (from the first submission):",
                  ", ".join(f"+{t} s: {n}" for t, n in error_seconds(said, wall)[:8]))
        for line in timeline(latencies):
            print(f"  {line}")
        if args.keep is not None:
            print(f"  the server's log and the fleet's output are in {args.keep}/")


if __name__ == "__main__":
    main()
