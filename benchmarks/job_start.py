"""How long the agent's executor takes to start a job: `Executor.start` of `true`, N times, as another user.

Run as root to measure the path a production agent takes (switching to the job's user through `setpriv`, or
by forking when `--fork`); as a normal user it measures starting that user's own jobs.

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

from nanum.agent.executor import Executor
from nanum.protocol import JobLaunch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--user", default=pwd.getpwuid(os.geteuid()).pw_name, help="Unix user the jobs run as")
    parser.add_argument("--starts", type=int, default=200)
    parser.add_argument("--fork", action="store_true", help="switch users in a forked child, not via setpriv")
    parser.add_argument("--env", type=int, default=10, help="variables in each job's own environment")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nanum-bench-") as tmp:
        os.chmod(tmp, 0o755)
        executor = Executor(Path(tmp) / "state", "bench", use_setpriv=not args.fork)
        env = {f"VAR_{i}": f"value number {i}" for i in range(args.env)}
        took = []
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
                if ended is None or ended.exit_code != 0:
                    raise SystemExit(f"job {job_id} did not end well: {ended}")
                executor.forget(job_id)
        finally:
            executor.close()
    ms = sorted(t * 1000 for t in took)
    print(f"{len(ms)} starts as {args.user} ({'fork' if args.fork else 'setpriv'}): "
          f"median {statistics.median(ms):.2f} ms, mean {statistics.fmean(ms):.2f} ms, "
          f"p90 {ms[int(len(ms) * 0.9)]:.2f} ms, max {ms[-1]:.2f} ms per Executor.start")


if __name__ == "__main__":
    main()
