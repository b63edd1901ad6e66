"""How long the agent's executor takes to start a job, and what a job costs the node: `true`, N times, one at a time
or in waves.

Run as root to measure the path a production agent takes (its launcher's waiter switches to the job's user); as a
normal user it measures starting that user's own jobs. Printed: `Executor.start_all` (median, p90, max), from that
call to the ends of its jobs being seen, and the CPU time per job of this process (the agent's part), of its job
launcher and of the jobs' own processes (each job's waiter and `true`, reaped by the launcher).

`--wave 8` starts 8 jobs in one call, as an agent does when a node's 8 GPUs are freed at once (a queue of short
jobs draining); `--agent-like` gives each job a cgroup where the node has a writable hierarchy and a checkpoint
directory, as `nanum agent` does for the jobs the server sends.

    python benchmarks/job_start.py --user nobody --starts 200
    python benchmarks/job_start.py --user nobody --starts 800 --wave 8 --agent-like
"""

from __future__ import annotations

import argparse
import os
import pwd
import statistics
import tempfile
import time
from pathlib import Path

from load import cpu_seconds  # the benchmarks' shared helpers

from nanum.agent import cgroups
from nanum.agent.executor import Executor
from nanum.agent.launch import launcher
from nanum.protocol import JobLaunch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--user", default=pwd.getpwuid(os.geteuid()).pw_name, help="Unix user the jobs run as")
    parser.add_argument("--starts", type=int, default=200)
    parser.add_argument("--env", type=int, default=10, help="variables in each job's own environment")
    parser.add_argument("--wave", type=int, default=1, help="jobs started by one call (Executor.start_all)")
    parser.add_argument("--agent-like", action="store_true",
                        help="a cgroup (where the node allows) and a checkpoint directory for each job")
    args = parser.parse_args()
    if args.wave < 1 or args.starts % args.wave:
        parser.error("--starts must be a multiple of --wave (at least 1)")
    with tempfile.TemporaryDirectory(prefix="nanum-bench-") as tmp:
        os.chmod(tmp, 0o755)
        state = Path(tmp) / "state"
        limits = cgroups.probe("bench", state)[0] if args.agent_like else None
        checkpoints = Path(tmp) / "checkpoints" if args.agent_like else None
        executor = Executor(state, "bench", cgroups=limits)
        launcher_pid = launcher().pid
        if launcher_pid is None:
            raise SystemExit("the job launcher did not start")
        env = {f"VAR_{i}": f"value number {i}" for i in range(args.env)}
        took, whole = [], []
        before = cpu_seconds(os.getpid()), cpu_seconds(launcher_pid)
        try:
            for first in range(1, args.starts + 1, args.wave):
                launches = [JobLaunch(job_id=job_id, name=f"bench{job_id}", command=["true"], workdir="/tmp", env=env,
                                      gpus=[0], unix_user=args.user, grace_s=1.0,
                                      checkpoint_dir=str(checkpoints / str(job_id)) if checkpoints else "")
                            for job_id in range(first, first + args.wave)]
                began = time.perf_counter()
                statuses = executor.start_all(launches)
                took.append(time.perf_counter() - began)
                for status in statuses:
                    if status.state != "running":
                        raise SystemExit(f"job {status.job_id} did not start: {status.reason}")
                for status in statuses:
                    ended = executor.wait(status.job_id, 10)
                    if ended is None or ended.exit_code != 0:
                        raise SystemExit(f"job {status.job_id} did not end well: {ended}")
                whole.append(time.perf_counter() - began)
                for status in statuses:
                    executor.forget(status.job_id)
                time.sleep(0.02)  # as between an agent's waves: its heartbeat, the server's tick
            after = cpu_seconds(os.getpid()), cpu_seconds(launcher_pid)
        finally:
            executor.close()
    ms = sorted(t * 1000 for t in took)
    n, calls = args.starts, len(ms)
    print(f"{n} starts as {args.user}, {args.wave} a call{', agent-like' if args.agent_like else ''}: median "
          f"{statistics.median(ms):.2f} ms, p90 {ms[int(calls * 0.9)]:.2f} ms, max {ms[-1]:.2f} ms per "
          f"Executor.start_all; {statistics.median(whole) * 1000:.2f} ms median to its jobs' ends seen")
    agent, launched = (after[0][0] - before[0][0]) / n, (after[1][0] - before[1][0]) / n
    jobs = (after[1][1] - before[1][1]) / n
    print(f"CPU per job: agent {agent * 1000:.2f} ms, launcher {launched * 1000:.2f} ms, "
          f"the job's processes {jobs * 1000:.2f} ms")


if __name__ == "__main__":
    main()
