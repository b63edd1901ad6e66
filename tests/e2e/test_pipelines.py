"""Sweeps and pipelines through the real `nanum` commands against a real `nanum up`: arrays that never run more
tasks than their limit, dependency chains, hold/modify/release, retries, and Slurm and LSF scripts as they are."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

TASK = ('echo "$(date +%s.%N) $NANUM_ARRAY_JOB_ID $NANUM_ARRAY_TASK_ID" > start-$NANUM_ARRAY_TASK_ID; sleep 0.6; '
        'date +%s.%N > end-$NANUM_ARRAY_TASK_ID')


def ok(result: object) -> str:
    assert result.returncode == 0, result.stderr  # type: ignore[attr-defined]
    return str(result.stdout)  # type: ignore[attr-defined]


def wait_all(cluster: Cluster, ids: list[int], *states: str, timeout: float = 90) -> None:
    for job_id in ids:
        cluster.wait_state(job_id, *states, timeout=timeout)


def test_an_array_runs_at_most_its_limit_at_once_and_every_task_with_its_id(
        cluster: Cluster, workdir: Path) -> None:
    out = ok(cluster.nanum("submit", "--array", "0-19%4", "--gpus", "0", "--cpus", "0", "--", "sh", "-c", TASK,
                           user="alice", cwd=workdir))
    array = int(out.split()[3])
    assert out.startswith(f"Submitted array job {array} (0-19%4)")
    folded = ok(cluster.nanum("ps", "--noheader", "--format", "%i %t", user="alice"))
    # one line for the array: its tasks still pending, as Slurm folds them ([0-19%4] until the first ones start,
    # which on a loaded machine may come before this `ps`)
    assert re.match(rf"{array}_\[\d+-19%4\] ", folded.strip() + " "), folded
    expanded = ok(cluster.nanum("ps", "--expand", "--fields", "id,state", user="alice"))
    assert f"{array}_19" in expanded and expanded.splitlines()[0].split() == ["ID", "STATE"]
    tasks = cluster.api("GET", "/jobs", query=f"array={array}")
    wait_all(cluster, [t["id"] for t in tasks], "completed")
    spans = []
    for task in range(20):
        started, array_id, task_id = (workdir / f"start-{task}").read_text().split()
        assert (int(array_id), int(task_id)) == (array, task)
        spans.append((float(started), float((workdir / f"end-{task}").read_text())))
    for start, _ in spans:
        running = sum(1 for s, e in spans if s <= start < e)
        assert running <= 4, f"{running} tasks ran at once"
    assert max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans) >= 2


def test_an_arrays_tasks_are_waited_for_and_read_by_the_names_ps_gives_them(cluster: Cluster, workdir: Path) -> None:
    """`nanum logs 5_1` printed job 51's output (Python's int reads '5_1' as 51), or "no job 51"; `nanum wait 5`
    waited for task 0 alone. Task 1 sleeps longest and fails with 3: waiting for the array waits for it."""
    task = 'echo "task $NANUM_ARRAY_TASK_ID"; [ "$NANUM_ARRAY_TASK_ID" != 1 ] || { sleep 1; exit 3; }'
    out = ok(cluster.nanum("submit", "--array", "0-2", "--gpus", "0", "--cpus", "0", "--", "sh", "-c", task,
                           user="alice", cwd=workdir))
    array = int(out.split()[3])
    waited = cluster.nanum("wait", str(array), "--timeout", "60", user="alice")
    assert waited.returncode == 3, waited.stderr
    assert waited.stderr == f"nanum: array {array}: 2 completed, 1 failed; not completed: {array}_1\n"
    assert {t["state"] for t in cluster.api("GET", "/jobs", query=f"array={array}")} == {"completed", "failed"}
    assert ok(cluster.nanum("logs", f"{array}_1", user="alice")) == "task 1\n"
    first = cluster.nanum("logs", str(array), user="alice")  # the array's id reads its first task, and says so
    assert (first.returncode, first.stdout) == (0, "task 0\n")
    assert first.stderr == (f"nanum: {array} is an array: this is its task {array}_0's output; `nanum logs "
                            f"{array}_N` shows task N's\n")
    second = next(t["id"] for t in cluster.api("GET", "/jobs", query=f"array={array}") if t["array_task"] == 1)
    by_id = cluster.nanum("logs", str(second), user="alice")  # a task's own job id: no word of an array
    assert (by_id.returncode, by_id.stdout, by_id.stderr) == (0, "task 1\n", "")
    assert cluster.nanum("wait", f"{array}_2", user="alice").returncode == 0
    for bad in (f"{array}_x", "1_2_3", "\u00b2"):
        refused = cluster.nanum("logs", bad, user="alice")
        assert refused.returncode == 2 and f"{bad!r} is not a job ID" in refused.stderr, refused.stderr
    missing = cluster.nanum("wait", f"{array}_7", user="alice")
    assert missing.returncode == 2 and f"array {array} has no task 7" in missing.stderr
    after = cluster.submit("alice", "--gpus", "0", "--cpus", "0", "--after-any", f"{array}_1", "--", "true",
                           cwd=workdir)
    shown = ok(cluster.nanum("show", str(after), user="alice"))
    assert re.search(rf"waits for: +--after-any {array}_1: task {array}_1 of array {array} sh \(failed\)\n", shown)


def test_a_chain_runs_in_order_and_a_failed_first_job_cancels_the_rest(cluster: Cluster, workdir: Path) -> None:
    step = "date +%s.%N > {name}; sleep 0.3"
    first = cluster.submit("bob", "--gpus", "0", "--cpus", "0", "--name", "prep", "--",
                           "sh", "-c", step.format(name="a"), cwd=workdir)
    second = cluster.submit("bob", "--gpus", "0", "--cpus", "0", "--after-ok", str(first), "--",
                            "sh", "-c", step.format(name="b"), cwd=workdir)
    third = cluster.submit("bob", "--gpus", "0", "--cpus", "0", "--after-ok", str(second), "--",
                           "sh", "-c", step.format(name="c"), cwd=workdir)
    shown = ok(cluster.nanum("show", str(third), user="bob"))
    assert re.search(rf"waits for: +--after-ok {second}: job {second} sh \(\w+\)\n +  --after-ok {first}: "
                     rf"job {first} prep \(\w+\)", shown), shown
    wait_all(cluster, [first, second, third], "completed")
    times = [float((workdir / n).read_text()) for n in "abc"]
    assert times == sorted(times)

    gate = "while [ ! -e go ]; do sleep 0.05; done; exit 3"  # fails once the test says so
    bad = cluster.submit("bob", "--gpus", "0", "--cpus", "0", "--", "sh", "-c", gate, cwd=workdir)
    rest = cluster.submit("bob", "--gpus", "0", "--cpus", "0", "--after-ok", str(bad), "--", "true", cwd=workdir)
    last = cluster.submit("bob", "--gpus", "0", "--cpus", "0", "--after-ok", str(rest), "--", "true", cwd=workdir)
    (workdir / "go").touch()
    got = cluster.wait_state(last, "cancelled")
    assert got["reason"] == (f"cancelled: dependency can never be met: job {rest} cancelled (--after-ok {rest})")
    assert cluster.job(rest)["reason"] == (
        f"cancelled: dependency can never be met: job {bad} failed (--after-ok {bad})")


def test_hold_modify_and_release_change_what_runs(cluster: Cluster, workdir: Path) -> None:
    blocker = cluster.submit("carol", "--gpus", "4", "--cpus", "0", "--", "sleep", "30", cwd=workdir)
    cluster.wait_state(blocker, "running")
    job_id = cluster.submit("carol", "--gpus", "1", "--cpus", "0", "--", "sleep", "30", cwd=workdir)
    assert ok(cluster.nanum("hold", str(job_id), user="carol")) == f"Held job {job_id}\n"
    ok(cluster.nanum("modify", str(job_id), "--gpus", "0", "--name", "tiny", "--time", "10m", user="carol"))
    got = cluster.job(job_id)
    assert (got["gpus"], got["name"], got["time_limit_s"]) == (0, "tiny", 600)
    time.sleep(1.5)  # it could run now beside the 4-GPU job, but it is held
    assert cluster.job(job_id)["state"] == "held"
    refused = cluster.nanum("modify", str(blocker), "--gpus", "1", user="carol")
    assert refused.returncode == 2 and "only a pending or held job can be modified" in refused.stderr
    ok(cluster.nanum("release", str(job_id), user="carol"))
    cluster.wait_state(job_id, "running")  # needs no GPU now: runs beside the 4-GPU job
    ok(cluster.nanum("cancel", str(job_id), str(blocker), user="carol"))
    wait_all(cluster, [job_id, blocker], "cancelled")


def test_retries_run_a_failing_job_three_times_keeping_each_exit_code(cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.submit("dave", "--gpus", "0", "--cpus", "0", "--retries", "2", "--",
                            "sh", "-c", "echo run >> runs; exit 7", cwd=workdir)
    got = cluster.wait_state(job_id, "failed", timeout=60)
    assert got["exits"] == [7, 7, 7] and got["runs"] == 3
    assert (workdir / "runs").read_text().split() == ["run"] * 3


SLURM = """#!/bin/bash
#SBATCH --job-name=slurm-train
#SBATCH --gres=gpu:2
#SBATCH -t 0:10:00
#SBATCH --cpus-per-task=1
#SBATCH --mem=1G
#SBATCH --output=train-%j.out
#SBATCH --error=train-%x.err
#SBATCH --mail-type=END
echo "gpus $CUDA_VISIBLE_DEVICES"
echo oops >&2
"""

LSF = """#!/bin/bash
#BSUB -J lsf-train
#BSUB -gpu "num=1:mode=shared"
#BSUB -W 0:05
#BSUB -n 1
#BSUB -o lsf-%J.out
#BSUB -q gpu
echo "gpus $CUDA_VISIBLE_DEVICES"
"""


def test_unmodified_slurm_and_lsf_scripts_run_with_their_resources_and_output_files(
        cluster: Cluster, workdir: Path) -> None:
    (workdir / "train.sbatch").write_text(SLURM)
    (workdir / "train.lsf").write_text(LSF)
    result = cluster.nanum("submit", "--json", "train.sbatch", user="alice", cwd=workdir)
    job = json.loads(ok(result))
    assert "line 3: #SBATCH --gres=gpu:2: used as --gpus 2" in result.stderr
    assert "line 9: #SBATCH --mail-type=END: ignored: nanum has no per-job mail" in result.stderr
    got = (job["name"], job["gpus"], job["time_limit_s"], job["memory_mb"], job["cpus"])
    assert got == ("slurm-train", 2, 600, 1024, 1)
    done = cluster.wait_state(job["id"], "completed")
    assert len(done["allocation"][0]["gpus"]) == 2
    assert (workdir / f"train-{job['id']}.out").read_text().startswith("gpus ")
    assert (workdir / "train-slurm-train.err").read_text() == "oops\n"

    result = cluster.nanum("submit", "--json", "train.lsf", user="alice", cwd=workdir)
    job = json.loads(ok(result))
    assert "#BSUB -q gpu: ignored: queues are not labs" in result.stderr
    assert (job["name"], job["gpus"], job["time_limit_s"], job["cpus"]) == ("lsf-train", 1, 300, 1)
    cluster.wait_state(job["id"], "completed")
    deadline = time.monotonic() + 5
    while not (workdir / f"lsf-{job['id']}.out").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (workdir / f"lsf-{job['id']}.out").read_text().startswith("gpus ")


SWEEP = """name = "grid"
command = "echo a={a} b={b}; echo NANUM_METRIC loss=$(( 1000 - {a} * 100 - {b} )) step=1"
max_running = 3
gpus = 0
cpus = 0
env = {GREETING = "hi"}
metric = "loss"

[grid]
a = [1, 2, 3]
b = [10, 20, 30]
"""


def test_a_grid_sweep_runs_every_trial_and_show_sorts_them_by_the_metric(cluster: Cluster, workdir: Path) -> None:
    (workdir / "sweep.toml").write_text(SWEEP)
    out = ok(cluster.nanum("sweep", "sweep.toml", user="dave", cwd=workdir))
    sweep = int(out.split()[2].rstrip(":"))
    assert out.startswith(f"Submitted sweep {sweep}: 9 trials (grid over a, b)")
    tasks = cluster.api("GET", "/jobs", query=f"array={sweep}")
    assert len(tasks) == 9 and tasks[0]["array_limit"] == 3 and tasks[0]["env"]["GREETING"] == "hi"
    (workdir / "typo.toml").write_text(SWEEP.replace("max_running", "max_runing"))
    refused = cluster.nanum("sweep", "typo.toml", user="dave", cwd=workdir)
    assert refused.returncode == 2 and "typo.toml: unknown key 'max_runing'" in refused.stderr, refused.stderr
    (workdir / "huge.toml").write_text(SWEEP.replace("gpus = 0", "gpus = 9223372036854775807"))
    refused = cluster.nanum("sweep", "huge.toml", user="dave", cwd=workdir)
    assert refused.returncode == 2 and "huge.toml: --gpus: at most 1024" in refused.stderr, refused.stderr
    wait_all(cluster, [t["id"] for t in tasks], "completed")
    csv = ok(cluster.nanum("sweep", "show", str(sweep), "--csv", user="dave")).splitlines()
    assert csv[0] == "trial,id,state,a,b,loss,step"
    rows = [line.split(",") for line in csv[1:]]
    assert [(int(r[3]), int(r[4]), int(r[5])) for r in rows] == sorted(
        ((a, b, 1000 - a * 100 - b) for a in (1, 2, 3) for b in (10, 20, 30)), key=lambda t: t[2])
    assert {r[2] for r in rows} == {"completed"}
    shown = ok(cluster.nanum("sweep", "show", str(sweep), "--max", user="dave")).splitlines()
    assert shown[0].split() == ["TRIAL", "ID", "STATE", "a", "b", "loss", "step"]
    assert shown[1].split()[1:6] == [f"{sweep}_0", "completed", "1", "10", "890"]
    assert shown[-1] == "sorted by loss, highest first"


def _blocks(text: str, fence: str) -> list[str]:
    """The code blocks of a Markdown text fenced with ```FENCE."""
    return [part.split("```", 1)[0] for part in text.split(f"```{fence}\n")[1:]]


def test_the_sweep_guides_example_runs_as_written(cluster: Cluster, workdir: Path) -> None:
    """docs/sweeps.md's worked example, its files taken from the page: what the page shows is what a user sees."""
    guide = (ROOT / "docs" / "sweeps.md").read_text()
    (workdir / "train.py").write_text(_blocks(guide, "python")[0])
    (workdir / "sweep.toml").write_text(_blocks(guide, "toml")[0])
    shown = [line.removeprefix("$ ") for line in _blocks(guide, "sh")[0].splitlines()]
    out = ok(cluster.nanum(*shown[0].split()[1:], user="dave", cwd=workdir))
    sweep = out.split()[2].rstrip(":")
    page_id = shown[1].split()[2].rstrip(":")
    assert out == shown[1].replace(page_id, sweep) + "\n"
    waited = cluster.nanum("wait", sweep, "--timeout", "120", user="dave")
    assert waited.returncode == 0, waited.stderr
    listed = ok(cluster.nanum("sweep", "show", sweep, user="dave"))
    expected = [line.replace(f"{page_id}_", f"{sweep}_").split() for line in shown[4:]]
    assert [line.split() for line in listed.splitlines()] == expected

