"""Crash harness: SIGKILL (and SIGSTOP) the server and the agents at random moments while a workload of short jobs
runs, over many seeds, then check from the jobs' own records that nothing went wrong.

    python benchmarks/crash.py                       # 500 jobs per seed, 10 seeds
    python benchmarks/crash.py --seeds 3 --jobs 100  # quicker

Each seed starts a real `nanum server` (SQLite, a short lease) and several `nanum agent`s with simulated GPUs,
submits the jobs from a thread (a submission whose answer is lost is sent again with the same
`client_request_id`, so it is acknowledged exactly once), and meanwhile, at random moments drawn from the seed:
kills the server and starts it again, kills an agent and starts it again (at once, or after longer than its
lease so that its jobs are fenced and requeued), or freezes an agent (SIGSTOP) for a while.

A job that finished while its node was cut off, and that the server then gave up with its node, rightly runs
again (the server cannot know it finished), and so does one the server asked to stop (preemption) just as it
finished (its agent's SIGTERM reached it before it exited); every other job must run to its end exactly once.

Every run of a job appends `start JOB NODE GPUS PID TIME` and, when it finishes, `end JOB NODE GPUS PID TIME` to
its own file, and holds an flock on a file per job and one per (node, GPU) while it runs: a run that cannot take
one of them writes `overlap` or `gpu-overlap`, since another live process holds it. Afterwards, for every
acknowledged job: the server says it completed, exactly one of its runs ended normally, no two of its runs
overlapped, and no GPU was held by two jobs at once; and the server has no job the harness did not acknowledge.

Prints kills survived, jobs checked and violations (0 expected) per seed and in total; exits 1 on a violation.
`tests/e2e/test_crash.py` runs the same harness in a short form.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.cluster import AgentProc, ServerProc, job_account, kill_job_processes, remove, shared_dir

#: A job: takes its locks, records its start, sleeps $1 seconds, records its end.
JOB_SCRIPT = r"""
d=$1; t=$2
n=${NANUM_PREEMPT_FILE%/jobs/*}; n=${n##*/agent-}
g=${CUDA_VISIBLE_DEVICES:-none}
log=$d/$NANUM_JOB_ID.runs
exec 8>>"$d/$NANUM_JOB_ID.lock"
flock -n 8 || echo "overlap $NANUM_JOB_ID $n $g $$ $(date +%s.%N)" >> "$log"
fd=4  # 4-7: dash takes single-digit descriptors only, and the wrapper uses 3
for i in $(echo "$g" | tr , ' '); do
  eval "exec $fd>>\"$d/gpu-$n-$i.lock\""
  flock -n $fd || echo "gpu-overlap $NANUM_JOB_ID $n $i $$ $(date +%s.%N)" >> "$log"
  fd=$((fd+1))
done
echo "start $NANUM_JOB_ID $n $g $$ $(date +%s.%N)" >> "$log"
sleep "$t"
echo "end $NANUM_JOB_ID $n $g $$ $(date +%s.%N)" >> "$log"
"""


@dataclass
class Workload:
    jobs: int = 500
    agents: int = 4
    gpus_per_agent: int = 2  # at most 4 (the job script's descriptors)
    #: Seconds each job sleeps, drawn uniformly.
    min_s: float = 0.1
    max_s: float = 0.6
    #: Seconds between disruptions, drawn uniformly.
    every_min_s: float = 1.0
    every_max_s: float = 4.0
    #: Seconds to wait for the last job after the last submission.
    drain_s: float = 240.0
    #: The server's --lease and --grace: long outages and freezes last longer than both.
    lease_s: float = 2.0
    grace_s: float = 0.5


@dataclass
class SeedResult:
    seed: int
    kills: int = 0
    freezes: int = 0
    jobs_checked: int = 0
    runs: int = 0
    requeued: int = 0
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)
    #: (node, from, to): wall-clock times an agent was killed or frozen.
    outages: list[tuple[str, float, float]] = field(default_factory=list)


class Submitter(threading.Thread):
    """Submits the workload; a lost answer is sent again with the same request id until one comes back."""

    def __init__(self, server: ServerProc, token: str, script: Path, rundir: Path, durations: list[float],
                 gpus: list[int], deadline: float) -> None:
        super().__init__(daemon=True)
        self.server, self.token, self.script, self.rundir = server, token, script, rundir
        self.durations, self.gpus, self.deadline = durations, gpus, deadline
        self.acknowledged: dict[int, str] = {}  # job id -> request id
        self.unanswered = 0
        self.retries = 0

    def run(self) -> None:
        for duration, gpus in zip(self.durations, self.gpus, strict=True):
            request_id = uuid.uuid4().hex
            body = {"command": ["sh", str(self.script), str(self.rundir), f"{duration:.2f}"], "gpus": gpus,
                    "workdir": str(self.rundir), "client_request_id": request_id}
            job_id = self._submit(body)
            if job_id is None:
                self.unanswered += 1
            else:
                self.acknowledged[job_id] = request_id

    def _submit(self, body: dict[str, object]) -> int | None:
        while time.monotonic() < self.deadline:
            try:
                return int(self.server.api("POST", "/jobs", body, token=self.token, timeout=10)["id"])
            except urllib.error.HTTPError as err:
                if err.code < 500:
                    raise
            except OSError:
                pass  # the server is down or the answer was lost: the same request id again
            self.retries += 1
            time.sleep(0.1)
        return None


def run_seed(seed: int, work: Workload, root: Path, log: bool = True) -> SeedResult:
    rng = random.Random(seed)
    result = SeedResult(seed)
    began = time.monotonic()
    rundir = shared_dir("nanum-crash-runs-")
    script = rundir / "job.sh"
    script.write_text(JOB_SCRIPT)
    script.chmod(0o755)
    server = ServerProc(root, ("--lease", str(work.lease_s), "--grace", str(work.grace_s)))
    agents: list[AgentProc] = []
    try:
        server.start()
        for i in range(work.agents):
            token = server.api("POST", "/nodes", {"name": f"n{i}"})["token"]
            agents.append(AgentProc(f"n{i}", server.url, token, root, gpus=str(work.gpus_per_agent)))
        user = server.api("POST", "/users", {"name": "crash", "labs": ["lab"], "unix_user": job_account()})
        for agent in agents:
            agent.start()
        durations = [rng.uniform(work.min_s, work.max_s) for _ in range(work.jobs)]
        gpus = [rng.choice([1, 1, 1, work.gpus_per_agent]) for _ in range(work.jobs)]
        deadline = time.monotonic() + work.drain_s + work.jobs * 0.2
        submitter = Submitter(server, user["token"], script, rundir, durations, gpus, deadline)
        submitter.start()
        _disrupt(rng, work, server, agents, submitter, result, deadline)
        submitter.join(max(0.0, deadline - time.monotonic()))
        _settle(server, agents)
        _wait_done(server, submitter, deadline)
        _check(server, submitter, rundir, result)
    except Exception as exc:  # a broken run is a violation, with what was known
        result.violations.append(f"harness: {type(exc).__name__}: {exc}\n{server.log_tail(20)}")
    finally:
        for agent in agents:
            agent.kill()
            kill_job_processes(agent.state_dir)
        server.kill()
        remove(rundir)
    result.seconds = time.monotonic() - began
    if log:
        print(f"seed {seed}: {result.kills} kills and {result.freezes} freezes survived, {result.jobs_checked} jobs "
              f"checked ({result.runs} runs, {result.requeued} requeued), {len(result.violations)} violations, "
              f"{result.seconds:.1f} s", flush=True)
        for v in result.violations[:10]:
            print(f"  violation: {v}", flush=True)
    return result


def _disrupt(rng: random.Random, work: Workload, server: ServerProc, agents: list[AgentProc],
             submitter: Submitter, result: SeedResult, deadline: float) -> None:
    """Kill or freeze parts of the cluster at random moments until the workload is submitted and mostly done."""
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(work.every_min_s, work.every_max_s))
        if not submitter.is_alive() and _unfinished(server, submitter) == 0:
            return
        what = rng.choice(["server", "agent", "agent", "both", "agent-long", "freeze"])
        agent = rng.choice(agents)
        if what in ("server", "both"):
            server.kill()
            result.kills += 1
        if what in ("agent", "both", "agent-long"):
            agent.kill()
            result.kills += 1
        if what == "freeze":
            agent.signal(signal.SIGSTOP)
            result.freezes += 1
        down_at = time.time()
        long = what in ("agent-long", "freeze")
        pause = rng.uniform(work.lease_s + 1, work.lease_s + work.grace_s + 3) if long else rng.uniform(0, 1)
        time.sleep(pause)
        if what in ("server", "both"):
            server.start()
        if what in ("agent", "both", "agent-long"):
            agent.start()
        if what == "freeze":
            agent.signal(signal.SIGCONT)
        if what != "server":
            result.outages.append((agent.name, down_at, time.time()))


def _unfinished(server: ServerProc, submitter: Submitter) -> int:
    try:
        jobs = server.api("GET", "/jobs")  # active jobs
    except OSError:
        return -1
    return len(jobs)


def _settle(server: ServerProc, agents: list[AgentProc]) -> None:
    """Everything up again for the drain."""
    if server.proc is None or server.proc.poll() is not None:
        server.start()
    for agent in agents:
        agent.signal(signal.SIGCONT)
        if agent.proc is None or agent.proc.poll() is not None:
            agent.start()


def _wait_done(server: ServerProc, submitter: Submitter, deadline: float) -> None:
    while time.monotonic() < deadline:
        states = _states(server)
        if all(states.get(j) in ("completed", "failed", "cancelled", "timeout") for j in submitter.acknowledged):
            return
        time.sleep(0.25)


def _states(server: ServerProc) -> dict[int, str]:
    return {job_id: state for job_id, (state, _) in _jobs(server).items()}


def _jobs(server: ServerProc) -> dict[int, tuple[str, str]]:
    """Job id -> (state, reason) of every job."""
    try:
        every = server.api("GET", "/jobs?all=true&limit=100000")
        return {int(j["id"]): (str(j["state"]), str(j.get("reason"))) for j in every}
    except OSError:
        return {}


def _check(server: ServerProc, submitter: Submitter, rundir: Path, result: SeedResult) -> None:
    jobs = _jobs(server)
    states = {job_id: state for job_id, (state, _) in jobs.items()}
    reasons = {job_id: reason for job_id, (_, reason) in jobs.items()}
    acknowledged = submitter.acknowledged
    result.jobs_checked = len(acknowledged)
    v = result.violations
    if submitter.unanswered:
        v.append(f"{submitter.unanswered} submissions never got an answer")
    extra = set(states) - set(acknowledged)
    if extra:
        v.append(f"the server has {len(extra)} jobs the harness did not acknowledge: {sorted(extra)[:10]}")
    for job_id in sorted(acknowledged):
        state = states.get(job_id)
        if state != "completed":
            v.append(f"job {job_id} is {state}, not completed: {reasons.get(job_id)}")
        lines = _lines(rundir / f"{job_id}.runs")
        starts = [ln for ln in lines if ln[0] == "start"]
        ends = [ln for ln in lines if ln[0] == "end"]
        result.runs += len(starts)
        result.requeued += len(starts) > 1
        events = _events(server, job_id)
        # Given up with its node by the server, or stopped by its own agent's fence (requeued for want of a lease).
        lost_at = [t for t, kind, msg in events if kind == "lost" or (kind == "requeued" and "lease" in (msg or ""))]
        stops_at = [t for t, kind, _ in events if kind in ("preempting", "lost")] + lost_at
        excused = [e for e in ends[:-1] if _unreported(e, result.outages, lost_at) or _raced(e, starts, stops_at)]
        if len(ends) - len(excused) != 1:
            v.append(f"job {job_id} ran to its end {len(ends)} times ({len(starts)} runs): {lines}; server: "
                     f"{[(round(t, 2), k) for t, k, _ in _events(server, job_id)]}; outages {result.outages}")
        for ln in lines:
            if ln[0] in ("overlap", "gpu-overlap"):
                v.append(f"job {job_id}: {' '.join(ln)}")
        spans = _spans(starts, ends)
        for (_, a1), (b0, _) in itertools.pairwise(spans):
            if a1 is not None and b0 < a1:
                v.append(f"job {job_id}: a run started at {b0:.3f} before the one before it ended at {a1:.3f}")


def _unreported(end: list[str], outages: list[tuple[str, float, float]], lost_at: list[float]) -> bool:
    """Whether a run that ended at `end` may have gone unreported: its node's agent was killed or frozen then
    (or within a second after, before it could report), and the server later gave the job up with its node, or
    its agent's fence stopped it as it was ending (a job that exits 0 after SIGTERM may have saved its work and
    left early, so a fenced job is requeued). Such a job rightly runs again: the server cannot know it finished."""
    node, at = end[2], float(end[5])
    cut_off = any(n == node and start - 1.0 <= at <= stop for n, start, stop in outages)
    return cut_off and any(t > at for t in lost_at)


def _raced(end: list[str], starts: list[list[str]], stops_at: list[float]) -> bool:
    """Whether the server asked this run to stop while it was finishing: its agent's SIGTERM may have reached the
    process after it wrote its end but before it exited, and a stopped job is requeued (it may have exited on
    SIGTERM after saving its work)."""
    began = next((float(s[5]) for s in starts if s[4] == end[4]), float(end[5]))
    return any(began <= t <= float(end[5]) + 0.5 for t in stops_at)


def _events(server: ServerProc, job_id: int) -> list[tuple[float, str, str]]:
    import sqlite3

    with contextlib.closing(sqlite3.connect(next(server.home.glob("*.db")))) as db:
        return list(db.execute("SELECT time, kind, message FROM events WHERE job_id = ? ORDER BY id", (job_id,)))


def _lines(path: Path) -> list[list[str]]:
    try:
        return [ln.split() for ln in path.read_text().splitlines() if ln.strip()]
    except OSError:
        return []


def _spans(starts: list[list[str]], ends: list[list[str]]) -> list[tuple[float, float | None]]:
    end_of = {ln[4]: float(ln[5]) for ln in ends}
    return sorted((float(ln[5]), end_of.get(ln[4])) for ln in starts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=2, help="simulated GPUs per agent")
    args = parser.parse_args()
    work = Workload(jobs=args.jobs, agents=args.agents, gpus_per_agent=args.gpus)
    results = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        root = Path(shared_dir(f"nanum-crash-{seed}-"))
        try:
            results.append(run_seed(seed, work, root))
        finally:
            remove(root)
    kills = sum(r.kills + r.freezes for r in results)
    checked = sum(r.jobs_checked for r in results)
    violations = sum(len(r.violations) for r in results)
    print(f"total: {len(results)} seeds, {kills} kills survived, {checked} jobs checked, {violations} violations")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
