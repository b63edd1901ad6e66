"""How fast nanum takes and starts work, beside task-spooler measured in the same run and Slurm measured before.

    .venv/bin/python benchmarks/throughput.py              # starts a fresh `nanum up --simulate-gpus 8`
    .venv/bin/python benchmarks/throughput.py --jobs 1000 --latency-jobs 50 --api-jobs 2000

Figures, each printed beside Slurm 22.05 (sbatch, measured before on this same kind of machine) and Debian's
task-spooler (`ts`): measured right after nanum's figures, in the same run, where it is installed (`apt-get
install task-spooler`; `benchmarks/taskspooler.py` says how), else figures measured before:
  1. submit-to-start latency on an idle node: from the client sending `POST /jobs` to the job's own first
     instruction (`date +%s.%N`), median and p99 over `--latency-jobs` jobs run one after another;
  2. submissions per second through the API: `--api-jobs` submissions from `--clients` concurrent httpx
     clients, while every GPU is busy so the jobs queue (the scheduler still runs on each submission);
  3. submissions per second through the CLI: `nanum submit` processes one after another;
  4. the `nanum` command's start-up: `nanum --help` and `nanum ps`, best of ten; each of `nanum submit`, `ps`,
     `show` and `cancel` as one process (median wall and CPU time of --cli-runs), a bash loop of --loop-jobs
     `nanum submit` (beside `sbatch --wrap true` in the same loop where sbatch is installed), and a 1,000-task
     array submitted in one request (`--cli-only` prints just these);
  5. draining `--jobs` trivial jobs (`true`, 1 GPU each) on 8 GPUs: from the first submission until the last
     job is recorded completed, all submitted at once; and a check that none was lost and none started twice
     on its node (from the agent's log, where each start is a line). Beside it, a job's run
     and a GPU's idle time between two jobs as the server recorded them (medians: what is not `true`'s own few
     milliseconds is the pipeline's), the CPU time per job of the server, of its agent (with its job launcher)
     and of the jobs' own processes, and how busy the machine was: a drain that keeps every core busy is bound
     by CPU, not by waiting.
Targets: >= 500 submissions/s via the API; median submit-to-start <= 10 ms; the drain at >= 250 jobs/s (1,000
jobs in 4 s), every state change still durable.

Every job asks for `cpus=0` so that GPUs are the only limit, as in the 8-GPU-slot setups Slurm and ts were
measured with (a 2-core test machine would otherwise run only two 1-CPU jobs at a time).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import pwd
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import NamedTuple, TypeVar

# the benchmarks' own modules: task-spooler's figures, the shared helpers
import taskspooler
from load import cpu_seconds, free_port, interpreter, machine_seconds, nanum_exe, stamped

from nanum.client import TERMINAL_STATES, ApiError, Client, NanumError

SLURM = {"api": 260.0, "cli": 260.0, "latency_median": 1.6, "latency_p99": None, "drain": 265.0}
#: task-spooler's figures measured before, printed where it is not installed here.
TS = {"api": 430.0, "cli": 430.0, "latency_median": 0.004, "latency_p99": None, "drain": 2.3}
BENCH_ACCOUNT = "nanum-bench"
T = TypeVar("T")


def job_account() -> str:
    """Jobs never run as root: as root, run them as a dedicated account (created once)."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    try:
        pwd.getpwnam(BENCH_ACCOUNT)
    except KeyError:
        subprocess.run(["useradd", "-m", "-s", "/bin/sh", BENCH_ACCOUNT], check=True, capture_output=True)
    return BENCH_ACCOUNT


@contextmanager
def fresh_nanum(gpus: int) -> Iterator[tuple[str, str, dict[str, str], int]]:
    """`nanum up` in a throw-away home; yields (url, admin token, environment for `nanum` commands, its pid)."""
    root = Path(tempfile.mkdtemp(prefix="nanum-bench-"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANUM_")}
    env.update(XDG_CONFIG_HOME=str(root / "config"), NANUM_HOME=str(root / "home"))
    with (root / "up.log").open("wb") as log:
        proc = subprocess.Popen([*nanum_exe(), "up", "--home", str(root / "home"), "--port", str(port),
                                 "--simulate-gpus", str(gpus)], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        token = wait_until_up(url, root / "home" / "admin-token", proc, root / "up.log")
        yield url, token, env, proc.pid
    except BaseException:
        sys.stderr.write(f"--- the end of `nanum up`'s output:\n{(root / 'up.log').read_text()[-4000:]}\n")
        raise
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(root, ignore_errors=True)


def wait_until_up(url: str, token_file: Path, proc: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"`nanum up` exited:\n{log.read_text()[-3000:]}")
        if token_file.exists():
            token = token_file.read_text().strip()
            try:
                with Client(url, token) as c:
                    if any(n["state"] == "up" and n["gpus"] for n in c.nodes()):
                        return token
            except NanumError:  # still starting
                pass
        time.sleep(0.1)
    sys.exit(f"`nanum up` did not come up in 60 s:\n{log.read_text()[-3000:]}")


def wait_idle(client: Client, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while client.jobs() and time.monotonic() < deadline:
        time.sleep(0.1)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# -- 1. latency ------------------------------------------------------------------------------------------------

def measure_latency(client: Client, n: int, workdir: Path) -> list[float]:
    """Seconds from sending the submission to the job's first instruction, one job at a time."""
    delays = []
    for i in range(n):
        stamp = workdir / f"lat-{i}"
        sent = time.time()
        job = client.submit(["sh", "-c", f"date +%s.%N > {stamp}"], gpus=1, cpus=0, workdir=str(workdir))
        delays.append(stamped(stamp) - sent)
        client.wait(job["id"], timeout=30, poll_s=0.005)
    return delays


# -- 2. and 3. submission rates ----------------------------------------------------------------------------

def api_rate(url: str, token: str, n: int, clients: int, workdir: Path, ids: list[int] | None = None) -> float:
    """Submissions per second from `clients` threads, each with its own connection; `ids` is given the jobs'."""
    per = [n // clients + (1 if i < n % clients else 0) for i in range(clients)]
    barrier = threading.Barrier(clients + 1)
    errors: list[BaseException] = []
    made = [] if ids is None else ids

    def worker(count: int) -> None:
        with Client(url, token) as c:
            barrier.wait()
            try:
                for _ in range(count):
                    made.append(c.submit(["true"], gpus=1, cpus=0, workdir=str(workdir))["id"])
            except Exception as exc:  # reported below
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in per]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        sys.exit(f"API submissions failed: {errors[0]}")
    return n / elapsed


def cli_rate(env: dict[str, str], n: int, workdir: Path) -> float:
    started = time.perf_counter()
    for _ in range(n):
        subprocess.run([*nanum_exe(), "submit", "--gpus", "1", "--cpus", "0", "--", "true"], env=env, cwd=workdir,
                       check=True, capture_output=True)
    return n / (time.perf_counter() - started)


def per_process(argv_for: Callable[[], list[str]], env: dict[str, str], workdir: Path, n: int) -> tuple[float, float]:
    """Median wall and CPU seconds (user + system) of one `nanum` process."""
    walls, cpus = [], []
    for _ in range(n):
        argv = argv_for()
        before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run(argv, env=env, cwd=workdir, check=True, capture_output=True)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def cli_figures(client: Client, env: dict[str, str], workdir: Path, n: int, loop: int) -> dict[str, float]:
    """Per-process times of submit, ps, show and cancel (median of `n`), a shell loop of `loop` submits (and of
    sbatch where it is installed), and a 1,000-task array in one request; run while every GPU is busy."""
    exe = nanum_exe()
    submit = [*exe, "submit", "--gpus", "1", "--cpus", "0", "--", "true"]
    out: dict[str, float] = {}
    env = with_bytecode(env, workdir)
    for argv in (submit, [*exe, "ps"]):  # the first run of each writes its bytecode, as an install does
        subprocess.run(argv, env=env, cwd=workdir, check=True, capture_output=True)
    for name, argv_for in (("submit", lambda: submit), ("ps", lambda: [*exe, "ps"])):
        out[f"{name}_wall_s"], out[f"{name}_cpu_s"] = per_process(argv_for, env, workdir, n)
    ids = iter([client.submit(["true"], gpus=1, cpus=0, workdir=str(workdir))["id"] for _ in range(n)])
    out["show_wall_s"], out["show_cpu_s"] = per_process(lambda: [*exe, "show", str(ids.__next__())], env,
                                                        workdir, n)
    ids = iter([client.submit(["true"], gpus=1, cpus=0, workdir=str(workdir))["id"] for _ in range(n)])
    out["cancel_wall_s"], out["cancel_cpu_s"] = per_process(lambda: [*exe, "cancel", str(ids.__next__())], env,
                                                            workdir, n)
    out["loop_per_s"] = shell_loop(f"{shlex.join(exe)} submit --gpus 1 --cpus 0 -- true", env, workdir, loop)
    if shutil.which("sbatch"):
        out["sbatch_loop_per_s"] = shell_loop("sbatch --wrap true", env, workdir, loop)
    started = time.perf_counter()
    client.submit(["true"], gpus=1, cpus=0, workdir=str(workdir), array="0-999")
    out["array_1000_s"] = time.perf_counter() - started
    return out


def with_bytecode(env: dict[str, str], workdir: Path) -> dict[str, str]:
    """`env` with Python's bytecode cache on (in a folder of its own), as for an installed nanum: without it
    (PYTHONDONTWRITEBYTECODE, as in some development shells) every process compiles nanum's sources again."""
    out = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    return out


def shell_loop(command: str, env: dict[str, str], workdir: Path, n: int) -> float:
    """Commands per second of `for i in $(seq N); do COMMAND > /dev/null; done` in bash."""
    started = time.perf_counter()
    subprocess.run(["bash", "-c", f"for i in $(seq {n}); do {command} > /dev/null || exit 1; done"], env=env,
                   cwd=workdir, check=True)
    return n / (time.perf_counter() - started)


def print_cli(figures: dict[str, float], loop: int) -> None:
    print(f"{'one nanum process (median)':<34} {'wall':>9} {'CPU':>9}")
    for name in ("submit", "ps", "show", "cancel"):
        wall, cpu = figures[f"{name}_wall_s"] * 1000, figures[f"{name}_cpu_s"] * 1000
        print(f"{'  nanum ' + name:<34} {wall:>6.0f} ms {cpu:>6.0f} ms  {'met' if wall <= 50 else 'MISSED'} (<= 50 ms)")
    sbatch = figures.get("sbatch_loop_per_s")
    beside = f"sbatch here {sbatch:.0f}/s" if sbatch else f"sbatch {SLURM['cli']:.0f}/s (Slurm 22.05, measured before)"
    rate = figures["loop_per_s"]
    print(f"{f'shell loop of {loop} nanum submit':<34} {rate:>6.1f}/s   {beside}; "
          f"{'met' if rate >= 20 else 'MISSED'} (>= 20/s)")
    print(f"{'1,000-task array, one request':<34} {figures['array_1000_s'] * 1000:>6.0f} ms  "
          f"{'met' if figures['array_1000_s'] < 1 else 'MISSED'} (< 1 s)")


def best_of(n: int, argv: list[str], env: dict[str, str]) -> float:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return min(times)


def with_gpus_busy(client: Client, workdir: Path, gpus: int, body: Callable[[], float]) -> float:
    """Run `body` while one job holds every GPU, then cancel everything it queued."""
    blocker = client.submit(["sleep", "3600"], gpus=gpus, cpus=0, workdir=str(workdir), name="blocker")
    client_wait_running(client, blocker["id"])
    try:
        return body()
    finally:
        for job in reversed(client.jobs()):  # the queued jobs first, then the one holding the GPUs
            with contextlib.suppress(ApiError):  # it ended meanwhile
                client.cancel(job["id"])
        wait_idle(client)


def client_wait_running(client: Client, job_id: int) -> None:
    while client.job(job_id)["state"] != "running":
        time.sleep(0.01)


# -- 5. drain ------------------------------------------------------------------------------------------------

def child_of(parent: int, match: Callable[[Path], bool]) -> int | None:
    """A child of process `parent` whose /proc directory `match` accepts."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            if int(text.rsplit(")", 1)[1].split()[1]) == parent and match(stat.parent):
                return int(stat.parent.name)
    return None


def agent_of(server_pid: int) -> int | None:
    """The local agent `nanum up` runs as its child."""
    return child_of(server_pid, lambda proc: "agent" in (proc / "cmdline").read_text())


def drain_cpu(server_pid: int, run: Callable[[], T], n: int) -> tuple[T, dict[str, float]]:
    """`run()`'s result, and the CPU milliseconds per job of the server, its agent (with its job launcher) and the
    jobs' processes, and the shares of the machine's CPU time that were busy and waiting for I/O meanwhile."""
    agent = agent_of(server_pid)
    if agent is None:
        sys.exit("cannot find the agent of `nanum up` to measure its CPU time")
    launcher = child_of(agent, lambda proc: (proc / "comm").read_text().strip() == "nanum-launcher")

    def node() -> tuple[float, float]:  # the agent's and its launcher's own; and their children's (the jobs)
        own, children = cpu_seconds(agent)
        if launcher is not None:
            more = cpu_seconds(launcher)
            own, children = own + more[0], children + more[1]
        return own, children

    before = cpu_seconds(server_pid), node(), machine_seconds()
    result = run()
    after = cpu_seconds(server_pid), node(), machine_seconds()
    per_job, elapsed = 1000 / n, max(after[2][2] - before[2][2], 1e-9)
    return result, {
        "drain_server_cpu_ms": (after[0][0] - before[0][0]) * per_job,
        "drain_agent_cpu_ms": (after[1][0] - before[1][0]) * per_job,
        "drain_job_processes_cpu_ms": (after[1][1] - before[1][1]) * per_job,
        "drain_machine_busy": (after[2][0] - before[2][0]) / elapsed,
        "drain_machine_iowait": (after[2][1] - before[2][1]) / elapsed,
    }


class Drained(NamedTuple):
    seconds: float  # from the first submission to the last completion
    submitting: float  # seconds spent submitting
    lost: int  # jobs that did not complete
    ids: frozenset[int]  # the drain's jobs
    run_ms: float  # median of a job's run as the server recorded it, from its start to its end
    idle_ms: float  # median of a GPU's wait between one job's end and the next one's start, as recorded


class Submitted(NamedTuple):
    ids: list[int]  # the drain's jobs
    started_at: float  # time.time() of the first submission
    seconds: float  # spent submitting


def drain(url: str, token: str, client: Client, n: int, clients: int, workdir: Path) -> Submitted:
    """Submit `n` trivial jobs at once and wait until every one has ended (`drained` then reads how it went).

    While it waits, it asks the server only about the last job submitted, every 0.1 s, and then for the jobs still
    active: a drain's figures are the server's work on the jobs, not on this benchmark's listings (listing the
    1,000 jobs while they ran took about 5 % of the server's CPU in a drain)."""
    ids: list[int] = []
    started, started_at = time.perf_counter(), time.time()
    api_rate(url, token, n, clients, workdir, ids)
    submitted = time.perf_counter() - started
    deadline = time.monotonic() + 600
    # FIFO: the last one ends (nearly) last; then whatever is left
    while client.job(max(ids))["state"] not in TERMINAL_STATES or client.jobs():
        if time.monotonic() > deadline:
            sys.exit("the drain did not end in 600 s")
        time.sleep(0.1)
    return Submitted(sorted(ids), started_at, submitted)


def drained(client: Client, submitted: Submitted) -> Drained:
    """How a drain went, from the server's records of its jobs: the last completion is the time the server
    recorded (`end_time`), not when `drain` noticed. The recorded runs also tell where a drain's time goes: a
    `true` takes a few milliseconds, and the rest of its recorded run and a GPU's idle time between jobs are the
    pipeline's (the tick, the agent's start, the end's report)."""
    wanted = set(submitted.ids)
    ours = [j for j in client.jobs(all=True, limit=100_000) if j["id"] in wanted]
    done = [j for j in ours if j["state"] == "completed" and j["exit_code"] == 0]
    runs = [(_at(j["start_time"]), _at(j["end_time"]), j["allocation"]) for j in done]
    by_gpu: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for start, end, allocation in runs:
        for part in allocation:
            for gpu in part["gpus"]:
                by_gpu.setdefault((part["node"], gpu), []).append((start, end))
    idle = [b[0] - a[1] for spans in by_gpu.values() for a, b in itertools.pairwise(sorted(spans))]
    ended = max(_at(j["end_time"]) for j in ours if j["end_time"])
    return Drained(ended - submitted.started_at, submitted.seconds, len(wanted) - len(done), frozenset(wanted),
                   statistics.median(end - start for start, end, _ in runs) * 1000 if runs else 0.0,
                   statistics.median(idle) * 1000 if idle else 0.0)


def started_twice(agent_log: Path, ids: frozenset[int]) -> int:
    """How many of the jobs `ids` the agent of `nanum up` started more than once (its log says `job N: started`
    at each start)."""
    starts = Counter(int(m) for m in re.findall(r"job (\d+): started", agent_log.read_text(errors="replace")))
    return sum(1 for job_id in ids if starts[job_id] > 1)


def _at(moment: str | None) -> float:
    return datetime.fromisoformat(moment).timestamp() if moment else 0.0


# -- report --------------------------------------------------------------------------------------------------

def row(label: str, value: float | None, unit: str, key: str, higher_is_better: bool,
        ts: dict[str, float | None]) -> str:
    def fmt(v: float | None) -> str:
        if v is None:
            return "-"
        if unit == "ms":
            return f"{v * 1000:.1f} ms"
        if unit == "s":
            return f"{v:.2f} s"
        return f"{v:.0f}/s"

    def ratio(other: float | None) -> str:
        if other is None or value is None or value == 0:
            return ""
        r = value / other if higher_is_better else other / value
        return f"({r:.2f}x)"

    return (f"{label:<34} {fmt(value):>11}   {fmt(SLURM[key]):>9} {ratio(SLURM[key]):>10}   "
            f"{fmt(ts[key]):>9} {ratio(ts[key]):>9}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=1000, help="jobs to drain")
    parser.add_argument("--latency-jobs", type=int, default=50)
    parser.add_argument("--api-jobs", type=int, default=2000)
    parser.add_argument("--cli-jobs", type=int, default=100)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--cli-runs", type=int, default=20, help="processes timed per command")
    parser.add_argument("--loop-jobs", type=int, default=200, help="submits in the shell loop")
    parser.add_argument("--cli-only", action="store_true", help="only the CLI figures (quick)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `timeout` still stops the nanum it started

    account = job_account()
    workdir = Path(tempfile.mkdtemp(prefix="nanum-bench-jobs-", dir="/tmp"))
    workdir.chmod(0o1777)
    with fresh_nanum(args.gpus) as (url, admin, env, server_pid):
        with Client(url, admin) as c:
            token = c.add_user("bench", ["bench"], unix_user=account)["token"]
        env = {**env, "NANUM_SERVER": url, "NANUM_TOKEN": token}
        with Client(url, token) as client:
            print(f"nanum at {url}, {args.gpus} simulated GPUs, jobs run as {account}, {interpreter()}", flush=True)
            cli_figs: dict[str, float] = {}
            with_gpus_busy(client, workdir, args.gpus, lambda: cli_figs.update(
                cli_figures(client, env, workdir, args.cli_runs, args.loop_jobs)) or 0.0)
            print_cli(cli_figs, args.loop_jobs)
            if args.cli_only:
                if args.json:
                    args.json.write_text(json.dumps(cli_figs, indent=2))
                return
            latency = measure_latency(client, args.latency_jobs, workdir)
            api = with_gpus_busy(client, workdir, args.gpus,
                                 lambda: api_rate(url, token, args.api_jobs, args.clients, workdir))
            cli = with_gpus_busy(client, workdir, args.gpus, lambda: cli_rate(env, args.cli_jobs, workdir))
            help_s = best_of(10, [*nanum_exe(), "--help"], env)
            ps_s = best_of(10, [*nanum_exe(), "ps"], env)
            submitted, drain_cpus = drain_cpu(
                server_pid, lambda: drain(url, token, client, args.jobs, args.clients, workdir), args.jobs)
            how = drained(client, submitted)
            drain_s, submit_s, lost = how.seconds, how.submitting, how.lost
            twice = started_twice(Path(env["NANUM_HOME"]).parent / "up.log", how.ids)
    shutil.rmtree(workdir, ignore_errors=True)
    spooled = taskspooler.measure(args.gpus, args.api_jobs, args.latency_jobs, args.jobs)

    figures = {
        "api_submissions_per_s": api, "cli_submissions_per_s": cli,
        "latency_median_s": statistics.median(latency), "latency_p99_s": percentile(latency, 0.99),
        "cli_help_s": help_s, "cli_ps_s": ps_s, "drain_s": drain_s, "drain_submit_s": submit_s,
        "drain_jobs": args.jobs, "lost": lost, "started_twice": twice, "drain_run_ms": how.run_ms,
        "drain_gpu_idle_ms": how.idle_ms,
        **drain_cpus, **cli_figs,
    }
    ts: dict[str, float | None] = dict(TS)
    if spooled is not None:
        ts = {"api": spooled.submissions_per_s, "cli": spooled.submissions_per_s,
              "latency_median": statistics.median(spooled.latencies_s),
              "latency_p99": percentile(spooled.latencies_s, 0.99), "drain": spooled.drain_s}
        figures.update({f"ts_{key}": value for key, value in ts.items() if key != "cli"})
        figures["ts_drain_lost"] = spooled.drain_lost
    print()
    print(f"{'':<34} {'nanum':>11}   {'Slurm':>9} {'':>10}   {'ts':>9} {'':>9}")
    print(row(f"submissions via API ({args.clients} clients)", api, "rate", "api", True, ts))
    print(row("submissions via CLI (sequential)", cli, "rate", "cli", True, ts))
    print(row("submit-to-start, median", figures["latency_median_s"], "ms", "latency_median", False, ts))
    print(row("submit-to-start, p99", figures["latency_p99_s"], "ms", "latency_p99", False, ts))
    print(row(f"drain {args.jobs} x `true` on {args.gpus} GPUs", drain_s, "s", "drain", False, ts))
    print(f"{'  of which submitting':<34} {submit_s:>9.2f} s")
    print(f"{'  jobs lost':<34} {lost:>11}")
    print(f"{'  jobs started twice':<34} {twice:>11}")
    print(f"{'  a run, start to end recorded':<34} {how.run_ms:>8.1f} ms median (`true` itself: a few ms)")
    print(f"{'  a GPU idle between two jobs':<34} {how.idle_ms:>8.1f} ms median")
    cpus = {k.removeprefix("drain_"): v for k, v in drain_cpus.items()}
    print(f"{'  CPU per job':<34} server {cpus['server_cpu_ms']:.1f} ms, agent {cpus['agent_cpu_ms']:.1f} ms, "
          f"the job's processes {cpus['job_processes_cpu_ms']:.1f} ms")
    print(f"{'  the machine meanwhile':<34} {cpus['machine_busy']:.0%} busy, {cpus['machine_iowait']:.0%} waiting "
          f"for I/O, on {os.cpu_count()} cores")
    print(f"{'nanum --help / nanum ps':<34} {help_s * 1000:>6.0f} ms / {ps_s * 1000:.0f} ms")
    print_cli(cli_figs, args.loop_jobs)
    print("(x: how many times nanum's figure beats the other; below 1 means slower)")
    if spooled is None:
        print("ts: figures measured before (task-spooler is not installed here)")
    else:
        print(f"ts: measured in this run, right after nanum ({spooled.drain_lost} of its drain's jobs lost; its "
              f"submission rate over at most {taskspooler.QUEUED_MAX} queued jobs, its submit-to-start including "
              "the `tsp` process's start); Slurm: measured before")
    rate = args.jobs / drain_s
    print(f"{'  drain rate':<34} {rate:>7.0f} jobs/s")
    print(f"targets: API >= 500/s {'met' if api >= 500 else 'MISSED'}; "
          f"median start <= 10 ms {'met' if figures['latency_median_s'] <= 0.01 else 'MISSED'}; "
          f"drain >= 250 jobs/s {'met' if rate >= 250 else 'MISSED'}; nothing lost {'yes' if not lost else 'NO'}; "
          f"nothing run twice {'yes' if not twice else 'NO'}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
