"""How long the agent's executor takes to start a job, and what a job costs the node: `true`, N times, one at a time.

Run as root to measure the path a production agent takes (its launcher's waiter switches to the job's user); as a
normal user it measures starting that user's own jobs. Printed: `Executor.start` (median, p90, max), from that
call to the job's end being seen, and the CPU time per job of this process (the agent's part), of its job
launcher and of the jobs' own processes (each job's waiter and `true`, reaped by the launcher).

    python benchmarks/job_start.py --user nobody --starts 200
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

from nanum.agent.executor import Executor
from nanum.agent.launch import launcher
from nanum.protocol import JobLaunch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--user", default=pwd.getpwuid(os.geteuid()).pw_name, help="Unix user the jobs run as")
    parser.add_argument("--starts", type=int, default=200)
    parser.add_argument("--env", type=int, default=10, help="variables in each job's own environment")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nanum-bench-") as tmp:
        os.chmod(tmp, 0o755)
        executor = Executor(Path(tmp) / "state", "bench")
        launcher_pid = launcher().pid
        if launcher_pid is None:
            raise SystemExit("the job launcher did not start")
        env = {f"VAR_{i}": f"value number {i}" for i in range(args.env)}
        took, whole = [], []
        before = cpu_seconds(os.getpid()), cpu_seconds(launcher_pid)
        try:
            for job_id in range(1, args.starts + 1):
                launch = JobLaunch(job_id=job_id, name=f"bench{job_id}", command=["true"], workdir="/tmp", env=env,
                                   gpus=[0], unix_user=args.user, checkpoint_dir="", grace_s=1.0)
                began = time.perf_counter()
                status = executor.start(launch)
                took.append(time.perf_counter() - began)
                if status.state != "running":
                    raise SystemExit(f"job {job_id} did not start: {status.reason}")
                ended = executor.wait(job_id, 10)
                whole.append(time.perf_counter() - began)
                if ended is None or ended.exit_code != 0:
                    raise SystemExit(f"job {job_id} did not end well: {ended}")
                executor.forget(job_id)
            after = cpu_seconds(os.getpid()), cpu_seconds(launcher_pid)
        finally:
            executor.close()
    ms = sorted(t * 1000 for t in took)
    n = len(ms)
    print(f"{n} starts as {args.user}: median {statistics.median(ms):.2f} ms, p90 {ms[int(n * 0.9)]:.2f} ms, "
          f"max {ms[-1]:.2f} ms per Executor.start; {statistics.median(whole) * 1000:.2f} ms median to its end seen")
    agent, launched = (after[0][0] - before[0][0]) / n, (after[1][0] - before[1][0]) / n
    jobs = (after[1][1] - before[1][1]) / n
    print(f"CPU per job: agent {agent * 1000:.2f} ms, launcher {launched * 1000:.2f} ms, "
          f"the job's processes {jobs * 1000:.2f} ms")


if __name__ == "__main__":
    main()
