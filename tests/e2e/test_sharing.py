"""Fair sharing on a real `nanum up`, told through the real `nanum` commands: a borrower gives its GPUs back
within a cycle plus its lab's grace when the owner needs them and resumes from its checkpoint directory; a lab at
its budget starts nothing new until an admin raises it; limits hold when ten users submit 200 jobs at once; and
usage equals the sum of the jobs' allocations to the second."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from nanum.client import Client
from tests.e2e.cluster import Cluster, job_account, remove, shared_dir

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

# Counts in tenths of a second, saving the count and marking a checkpoint at every step, to 40 and then on until
# the test creates `release` beside the count (so it cannot end before the owner's job preempts it, however
# slow the machine); resumes from the saved count; on SIGTERM says whether the preempt file was there first.
COUNTER = (
    'cd "$NANUM_CHECKPOINT_DIR"; n=0; if [ -f count ]; then n=$(cat count); echo "resumed from $n"; fi; '
    'trap \'if [ -e "$NANUM_PREEMPT_FILE" ]; then echo "term: preempt file present"; fi; exit 143\' TERM; '
    "while [ $n -lt 40 ] || [ ! -e release ]; do n=$((n+1)); echo $n > count; touch .checkpoint; sleep 0.1; done; "
    "echo done"
)
# Ignores SIGTERM: only the SIGKILL after the grace period stops it.
STUBBORN = "trap '' TERM; while :; do sleep 0.1; done"


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@contextlib.contextmanager
def running_cluster(gpus: str, users: dict[str, str]) -> Iterator[Cluster]:
    """`nanum up` in a directory the jobs' account can traverse (their checkpoint directories live in it)."""
    root = shared_dir("nanum-sharing-")
    cluster = Cluster(root, gpus=gpus)
    try:
        try:
            cluster.start()
        except RuntimeError as exc:
            pytest.fail(str(exc))
        account = job_account()
        for name, lab in users.items():
            cluster.add_user(name, account, lab)
        yield cluster
    finally:
        cluster.stop()
        remove(root)


def admin(cluster: Cluster, *args: str) -> None:
    result = cluster.nanum(*args)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def labs() -> Iterator[Cluster]:
    """vision (alice, carol) is guaranteed all 4 GPUs; nlp (bob, dave) has no guarantee and a 1 s grace, so
    its jobs only ever borrow."""
    with running_cluster("4", {"alice": "vision", "bob": "nlp", "carol": "vision", "dave": "nlp"}) as cluster:
        admin(cluster, "lab", "set", "vision", "--guaranteed-gpus", "4")
        admin(cluster, "lab", "set", "nlp", "--guaranteed-gpus", "0", "--grace", "1")
        yield cluster


def wait_until(predicate: Any, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        time.sleep(0.05)


def wait_requeued(cluster: Cluster, job_id: int, after: int, timeout: float = 10.0) -> tuple[dict[str, Any], float]:
    """The job once a preemption has requeued it, and how many seconds after job `after` was submitted that was.

    Its preempted run segment says so, not its state: a requeued job is pending only until its GPUs are free again,
    which is milliseconds when the job that needed them is short, and a poll of its state can miss that."""
    def preempted() -> list[dict[str, Any]]:
        return [s for s in cluster.api("GET", f"/jobs/{job_id}")["segments"] if s["outcome"] == "preempted"]

    wait_until(preempted, timeout=timeout, what=f"job {job_id} requeued by a preemption")
    submitted = cluster.api("GET", f"/jobs/{after}")["submit_time"]
    return cluster.job(job_id), seconds(preempted()[0]["end"]) - seconds(submitted)


def test_a_borrower_is_preempted_when_the_owner_submits_and_resumes_from_its_checkpoint(
        labs: Cluster, workdir: Path) -> None:
    cluster = labs
    borrower = cluster.submit("bob", "--gpus", "4", "--cpus", "0", "--", "sh", "-c", COUNTER, cwd=workdir)
    cluster.wait_state(borrower, "running")
    count = cluster.home / "checkpoints" / str(borrower) / "count"
    wait_until(lambda: count.exists() and int(count.read_text() or 0) >= 5, what="five checkpoints")
    row = next(line for line in cluster.nanum("ps", user="bob").stdout.splitlines()
               if line.split()[0] == str(borrower))
    assert "running*" in row  # borrowing, marked
    assert cluster.job(borrower)["borrowing"] is True

    owner = cluster.submit("alice", "--gpus", "4", "--cpus", "0", "--", "sleep", "1", cwd=workdir)
    requeued, took = wait_requeued(cluster, borrower, after=owner)
    assert took < 1.0 + 1.0 + 1.0, f"requeued {took:.2f} s after the owner submitted (cycle 1 s + grace 1 s)"
    assert requeued["preemptions"] == 1
    assert requeued["lost_gpu_hours"] < 4 * 0.5 / 3600  # it had checkpointed a tenth of a second before
    cluster.wait_state(owner, "running", "completed", timeout=10)

    (count.parent / "release").touch()
    assert cluster.nanum("wait", str(borrower), "--timeout", "60", user="bob").returncode == 0
    done = cluster.job(borrower)
    assert (done["runs"], done["preemptions"]) == (2, 1)
    assert [s["outcome"] for s in done["segments"]] == ["preempted", "completed"]
    log = cluster.nanum("logs", str(borrower), user="bob").stdout
    assert "term: preempt file present" in log
    resumed = int(log.split("resumed from ")[1].split()[0])
    assert resumed >= 5 and log.rstrip().endswith("done")
    shown = cluster.nanum("show", str(borrower), user="bob").stdout
    assert "preemptions:" in shown and "preempted" in shown
    print(f"\nborrower requeued {took:.2f} s after the owner's submit; resumed from step {resumed}")


def test_a_job_that_ignores_sigterm_is_killed_after_its_labs_grace(labs: Cluster, workdir: Path) -> None:
    cluster = labs
    borrower = cluster.submit("dave", "--gpus", "4", "--cpus", "0", "--", "sh", "-c", STUBBORN, cwd=workdir)
    cluster.wait_state(borrower, "running")
    owner = cluster.submit("carol", "--gpus", "2", "--cpus", "0", "--", "true", cwd=workdir)
    _, took = wait_requeued(cluster, borrower, after=owner)
    assert 1.0 <= took < 1.0 + 1.0 + 1.5, f"requeued {took:.2f} s after the owner submitted; the grace is 1 s"
    assert cluster.nanum("wait", str(owner), "--timeout", "30", user="carol").returncode == 0
    cluster.wait_state(borrower, "running", timeout=15)  # borrows again once the GPUs are idle
    assert cluster.nanum("cancel", str(borrower), user="dave").returncode == 0
    cluster.wait_state(borrower, "cancelled", timeout=10)
    print(f"\nSIGTERM-ignoring borrower requeued {took:.2f} s after the owner's submit (grace 1 s)")


def test_a_lab_at_its_budget_starts_nothing_new_until_an_admin_raises_it(labs: Cluster, workdir: Path) -> None:
    cluster = labs
    assert cluster.nanum("lab", "set", "vision", "--monthly-gpu-hours", "0.003").returncode == 0  # 10.8 GPU-s
    try:
        spend = cluster.submit("alice", "--gpus", "4", "--cpus", "0", "--", "sleep", "3", cwd=workdir)
        assert cluster.nanum("wait", str(spend), "--timeout", "60", user="alice").returncode == 0
        refused = cluster.submit("carol", "--gpus", "1", "--cpus", "0", "--", "true", cwd=workdir)
        wait_until(lambda: cluster.job(refused)["reason_code"] == "budget", timeout=10, what="budget reason")
        job = cluster.job(refused)
        assert job["state"] == "pending"
        assert job["reason"].startswith("lab vision has used its 0.003 GPU-hours for ")
        assert "nanum lab set vision --monthly-gpu-hours" in job["hint"]
        spent = "lab vision has used its 0.003 GPU-hours"
        wait_until(  # the warning is refreshed with the usage figures, which may trail the reason under load
            lambda: (cluster.job(refused)["budget_warning"] or "").startswith(spent),
            timeout=10, what="the 100 % budget warning")
        ps = cluster.nanum("ps", user="carol").stdout
        assert "! lab vision has used its 0.003 GPU-hours" in ps
        shown = cluster.nanum("lab", "show", "vision", user="carol").stdout
        assert "nanum: lab vision has used" in shown and "set monthly_gpu_hours none -> 0.003" in shown
        time.sleep(1.5)
        assert cluster.job(refused)["state"] == "pending"  # still refused: nothing changed

        assert cluster.nanum("lab", "set", "vision", "--monthly-gpu-hours", "1").returncode == 0
        raised = time.monotonic()
        assert cluster.nanum("wait", str(refused), "--timeout", "30", user="carol").returncode == 0
        print(f"\nrefused job ran and ended {time.monotonic() - raised:.2f} s after the admin raised the budget")
    finally:
        cluster.nanum("lab", "set", "vision", "--monthly-gpu-hours", "none")


USERS = tuple(f"u{i}" for i in range(10))  # u0..u4 in lab-a, u5..u9 in lab-b
LIMITS = {"lab-a": ("gpus", 5), "lab-b": ("jobs", 3), "u0": ("gpus", 1), "u5": ("jobs", 1), "u7": ("gpus", 2)}


@pytest.fixture(scope="module")
def crowd() -> Iterator[Cluster]:
    users = {name: "lab-a" if i < 5 else "lab-b" for i, name in enumerate(USERS)}
    with running_cluster("8", users) as cluster:
        admin(cluster, "lab", "set", "lab-a", "--max-gpus", "5")
        admin(cluster, "lab", "set", "lab-b", "--max-running-jobs", "3")
        admin(cluster, "user", "set", "u0", "--max-gpus", "1")
        admin(cluster, "user", "set", "u5", "--max-running-jobs", "1")
        admin(cluster, "user", "set", "u7", "--max-gpus", "2")
        yield cluster


def peak(intervals: list[tuple[float, float, int]]) -> int:
    """The most held at once; an end at the same instant as a start counts first."""
    events = sorted([(s, 1, n) for s, _, n in intervals] + [(e, 0, -n) for _, e, n in intervals])
    held = best = 0
    for _, _, delta in events:
        held += delta
        best = max(best, held)
    return best


def test_limits_hold_when_ten_users_submit_two_hundred_jobs_at_once_and_usage_adds_up(
        crowd: Cluster, workdir: Path) -> None:
    def submit_twenty(user: str) -> list[int]:
        sizes = [1] * 20 if user == "u0" else [1 + k % 2 for k in range(20)]  # u0 may hold 1 GPU
        with Client(crowd.url, crowd.tokens[user]) as client:
            return [client.submit(["sleep", "0.2"], gpus=g, cpus=0, workdir=str(workdir))["id"] for g in sizes]

    began = time.monotonic()
    with ThreadPoolExecutor(len(USERS)) as pool:
        ids = [i for chunk in pool.map(submit_twenty, USERS) for i in chunk]
    submitted = time.monotonic() - began
    assert len(ids) == 200
    too_big = crowd.nanum("submit", "--gpus", "2", "--", "true", user="u0", cwd=workdir)
    assert too_big.returncode == 2 and "user u0 has max_gpus 1" in too_big.stderr
    with Client(crowd.url, crowd.admin_token) as admin:
        jobs = [admin.wait(i, timeout=150) for i in ids]
    drained = time.monotonic() - began
    unfinished = [(j["id"], j["state"], j.get("reason"), j.get("segments"), crowd.nanum("show", str(j["id"])).stdout)
                  for j in jobs if j["state"] != "completed"]
    assert not unfinished, unfinished

    spans: dict[str, list[tuple[float, float, int]]] = {}
    for j in jobs:  # every run: a job backfilled over a reservation may have been preempted and run again
        for run in j["segments"] or ():
            span = (seconds(run["start"]), seconds(run["end"]), j["gpus"])
            for key in (j["lab"], j["user"], "cluster"):
                spans.setdefault(key, []).append(span)
    for key, (what, limit) in LIMITS.items():
        counted = spans[key] if what == "gpus" else [(s, e, 1) for s, e, _ in spans[key]]
        assert peak(counted) <= limit, f"{key} exceeded max {what} {limit}"
    assert peak(spans["cluster"]) <= 8
    assert peak([(s, e, 1) for s, e, _ in spans["lab-b"]]) == 3  # the limit was reached, and held

    expected = {user: sum(g * (e - s) for s, e, g in spans[user]) for user in USERS}
    report = json.loads(crowd.nanum("usage", "--by", "user", "--json").stdout)
    got = {r["key"]: r["gpu_seconds"] for r in report["rows"]}
    for user in USERS:
        assert abs(got[user] - expected[user]) < 0.05, f"{user}: usage {got[user]} vs allocations {expected[user]}"
    total = sum(expected.values())
    assert abs(report["total"]["gpu_seconds"] - total) < 1.0
    assert report["total"]["jobs"] == 200 and report["total"]["avg_wait_s"] > 0
    by_day = json.loads(crowd.nanum("usage", "--by", "day", "--json").stdout)
    assert abs(by_day["total"]["gpu_seconds"] - total) < 1.0
    csv_total = crowd.nanum("usage", "--by", "lab", "--csv").stdout.splitlines()[-1].split(",")
    assert csv_total[:2] == ["lab", "total"] and abs(float(csv_total[3]) - total) < 1.0
    print(f"\n200 submissions from 10 users in {submitted:.2f} s; all done {drained:.1f} s after the first; "
          f"{total:.1f} GPU-seconds charged, {abs(report['total']['gpu_seconds'] - total):.4f} s from the "
          "sum of the allocations")
