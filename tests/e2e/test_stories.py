"""The stories nanum exists for, told through the real `nanum` commands against a real `nanum up`:
researchers racing for the same GPUs never share one, a job waiting for 2 GPUs starts the moment they free,
a job sees only its own GPUs, and requests that cannot or may not be served are refused in one clear line."""

from __future__ import annotations

import itertools
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.conftest import USERS

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# Each job notes when it started on which GPUs and when it finished, in files named after its id.
RECORD = ('echo "$(date +%s.%N) $CUDA_VISIBLE_DEVICES" > start-$NANUM_JOB_ID; sleep {secs}; '
          'date +%s.%N > end-$NANUM_JOB_ID')


def record_job(secs: float) -> list[str]:
    # --cpus 0: GPUs are the only limit, even on a test machine with fewer CPU cores than simulated GPUs.
    return ["--cpus", "0", "--", "sh", "-c", RECORD.format(secs=secs)]


def interval(workdir: Path, job_id: int) -> tuple[float, float, set[int]]:
    started, gpus = (workdir / f"start-{job_id}").read_text().split()
    ended = (workdir / f"end-{job_id}").read_text()
    return float(started), float(ended), {int(g) for g in gpus.split(",")}


def test_four_researchers_racing_for_four_gpus_never_share_one_and_the_queue_drains_in_order(
        cluster: Cluster, workdir: Path) -> None:
    """Equal jobs of one lab start in the order they were sent. Between the two labs (alice and carol in
    vision, bob and dave in nlp) the default order lets the lab further below its fair share go first, so the
    labs' jobs may interleave out of submission order."""
    def submit_three(user: str) -> list[int]:
        return [cluster.submit(user, "--gpus", "1", "--name", f"{user}-{k}", *record_job(0.8), cwd=workdir)
                for k in range(3)]

    with ThreadPoolExecutor(len(USERS)) as pool:
        owners = dict(zip(USERS, pool.map(submit_three, USERS), strict=True))
    for user, ids in owners.items():
        for job_id in ids:
            done = cluster.nanum("wait", str(job_id), "--timeout", "60", user=user)
            assert done.returncode == 0, done.stderr

    runs = {job_id: interval(workdir, job_id) for ids in owners.values() for job_id in ids}
    for a, (start_a, end_a, gpus_a) in runs.items():
        assert len(gpus_a) == 1 and gpus_a <= {0, 1, 2, 3}
        for b, (start_b, end_b, gpus_b) in runs.items():
            if a < b and gpus_a & gpus_b:
                assert end_a <= start_b or end_b <= start_a, f"jobs {a} and {b} shared GPU {gpus_a & gpus_b}"
    labs = {"vision": [*owners["alice"], *owners["carol"]], "nlp": [*owners["bob"], *owners["dave"]]}
    for lab, ids in labs.items():
        for earlier, later in itertools.pairwise(sorted(ids)):
            assert runs[later][0] >= runs[earlier][0] - 0.3, f"job {later} of lab {lab} started before job {earlier}"
    assert max(e for _, e, _ in runs.values()) - min(s for s, _, _ in runs.values()) < 3 * 0.8 + 4


def test_a_job_needing_two_gpus_starts_the_moment_colleagues_free_them(cluster: Cluster, workdir: Path) -> None:
    long_run = cluster.submit("carol", "--gpus", "2", "--cpus", "0", "--", "sleep", "120", cwd=workdir)
    ending = cluster.submit("alice", "--gpus", "1", *record_job(4), cwd=workdir)  # still running at the checks below
    cluster.wait_state(long_run, "running")
    cluster.wait_state(ending, "running")
    waiting = cluster.submit("bob", "--gpus", "2", *record_job(0.1), cwd=workdir)

    pending = cluster.job(waiting)
    assert pending["state"] == "pending"
    assert pending["reason"]
    table = cluster.nanum("ps", user="bob")
    row = next(line for line in table.stdout.splitlines() if line.split()[0] == str(waiting))
    assert "pending" in row
    assert len(row) <= 100

    assert cluster.nanum("wait", str(waiting), "--timeout", "60", user="bob").returncode == 0
    freed = interval(workdir, ending)[1]
    started = interval(workdir, waiting)[0]
    assert 0 <= started - freed < 1.5, f"bob's job started {started - freed:.2f} s after the GPUs freed"
    assert cluster.nanum("cancel", str(long_run), user="carol").returncode == 0
    cluster.wait_state(long_run, "cancelled")


def test_a_job_sees_only_its_own_gpus_and_its_script_headers_apply(cluster: Cluster, workdir: Path) -> None:
    script = workdir / "show-gpus.sh"
    script.write_text('#!/bin/sh\n#NANUM --gpus 2 --time 5m\necho "job=$NANUM_JOB_ID gpus=$CUDA_VISIBLE_DEVICES"\n')
    job_id = cluster.submit("alice", "show-gpus.sh", cwd=workdir)
    assert cluster.nanum("wait", str(job_id), user="alice").returncode == 0

    job = cluster.job(job_id)
    (placed,) = job["allocation"]
    assert len(placed["gpus"]) == 2
    assert job["time_limit_s"] == 300
    logs = cluster.nanum("logs", str(job_id), user="alice")
    assert logs.stdout == f"job={job_id} gpus={','.join(map(str, placed['gpus']))}\n"


def test_wait_and_logs_follow_a_job_to_its_end_and_its_exit_code(cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.submit("dave", "--", "sh", "-c", "echo one; sleep 1; echo two; exit 3", cwd=workdir)
    follow = cluster.nanum("logs", "-f", str(job_id), user="dave")
    assert (follow.returncode, follow.stdout) == (0, "one\ntwo\n")
    waited = cluster.nanum("wait", str(job_id), user="dave")
    assert waited.returncode == 3
    shown = cluster.nanum("show", str(job_id), user="dave").stdout
    assert "state:" in shown and "failed" in shown
    assert json.loads(cluster.nanum("ps", "--all", "--json", user="dave").stdout)[-1]["exit_code"] == 3


def test_logs_of_a_job_that_just_ended_show_all_its_output_even_more_than_a_heartbeat_carries(
        cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.submit("dave", "--", "sh", "-c", "head -c 20000000 /dev/zero | tr '\\0' x; echo; echo end",
                            cwd=workdir)
    cluster.wait_state(job_id, "completed")
    logs = cluster.nanum("logs", str(job_id), user="dave")
    assert (logs.returncode, len(logs.stdout), logs.stdout[-5:], logs.stderr) == (0, 20_000_005, "\nend\n", "")


def test_only_the_owner_or_an_admin_may_cancel_a_job(cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.submit("alice", "--", "sleep", "120", cwd=workdir)
    cluster.wait_state(job_id, "running")

    refused = cluster.nanum("cancel", str(job_id), user="bob")
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"nanum: error: job {job_id} belongs to another user; ")
    assert len(refused.stderr.splitlines()) == 1
    assert cluster.job(job_id)["state"] == "running"
    logs = cluster.nanum("logs", str(job_id), user="bob")
    assert logs.returncode == 2

    assert cluster.nanum("cancel", str(job_id), user="alice").stdout == f"Cancelled job {job_id}\n"
    waited = cluster.nanum("wait", str(job_id), "--timeout", "60", user="alice")
    assert waited.returncode == 1
    assert "cancelled" in waited.stderr


@pytest.mark.parametrize(
    ("args", "names"),
    [
        pytest.param(["--gpus", "64"], ["64", "4"], id="more-gpus-than-any-node"),
        pytest.param(["--priority", "500"], ["priority"], id="priority-out-of-range"),
        pytest.param(["--lab", "no-such-lab"], ["no-such-lab"], id="not-a-member"),
        pytest.param(["--mem", "32X"], ["--mem"], id="unreadable-memory"),
        pytest.param(["--time", "soon"], ["--time"], id="unreadable-time"),
    ],
)
def test_bad_requests_are_refused_at_once_in_one_line(cluster: Cluster, workdir: Path, args: list[str],
                                                       names: list[str]) -> None:
    before = len(json.loads(cluster.nanum("ps", "--all", "--json").stdout))
    started = time.monotonic()
    result = cluster.nanum("submit", *args, "--", "true", user="alice", cwd=workdir)
    assert result.returncode == 2
    assert result.stderr.startswith("nanum: error: ")
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for name in names:
        assert name in result.stderr
    assert time.monotonic() - started < 5
    assert len(json.loads(cluster.nanum("ps", "--all", "--json").stdout)) == before
