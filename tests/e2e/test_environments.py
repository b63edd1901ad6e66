"""Environments, datasets and checkpoints end to end, as people use them: the real `nanum` commands against a real
`nanum up` (or server and agents), jobs run as a real Unix account, containers by a real Podman.

- a job in a container image runs as its owner (uid inside = the account's), sees its GPU and reads its dataset
  read-only; a job with a Python environment uses that Python; a setup line runs first (from a #NANUM line);
- a job no node can serve waits, saying what is missing; a node without a container runtime is passed over;
- a job whose node dies resumes on another node from the checkpoint it left on the shared checkpoint root.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.containers import IMAGE, podman_env, podman_missing, remove_store
from tests.e2e.cluster import AgentProc, Cluster, ServerProc, job_account, kill_job_processes, remove, shared_dir

LEASE_S, GRACE_S = 3.0, 1.0


@pytest.fixture(scope="module")
def podman() -> Iterator[dict[str, str]]:
    if (why := podman_missing()) is not None:
        pytest.skip(why)
    root = shared_dir("envs-e2e-podman-")
    env = podman_env(root)
    yield env
    remove_store(root, env)


@pytest.fixture
def box(tmp_path: Path, podman: dict[str, str]) -> Iterator[Cluster]:
    """`nanum up` whose agent runs containers from the test's Podman store, and alice (lab vision)."""
    cluster = Cluster(tmp_path, gpus="2", extra_env=podman)
    cluster.start()
    try:
        assert cluster.nanum("lab", "add", "vision").returncode == 0
        cluster.add_user("alice", job_account(), "vision")
        yield cluster
    finally:
        cluster.stop()


def logs(cluster: Cluster, job_id: int) -> str:
    result = cluster.nanum("logs", str(job_id))
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_jobs_run_in_an_image_a_python_environment_and_behind_a_setup_line(box: Cluster, workdir: Path) -> None:
    uid = pwd.getpwnam(job_account()).pw_uid
    data = workdir / "tiny"
    data.mkdir()
    (data / "train.txt").write_text("cats and dogs\n")
    venv = workdir / "venv"
    # A Python the job's account may run (this test's own may live under root's closed home).
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    spec = workdir / "box.toml"
    spec.write_text(f'name = "box"\nimage = "{IMAGE}"\nruntime = "podman"\ndescription = "busybox, for tests"\n')
    added = [box.nanum("environment", "add", "--file", str(spec)),
             box.nanum("environment", "add", "venv", "--python", str(venv)),
             box.nanum("environment", "add", "cuda", "--setup", "export CUDA_HOME=/opt/cuda-12.4"),
             box.nanum("dataset", "add", "tiny", str(data), "--description", "two animals")]
    assert all(r.returncode == 0 for r in added), [r.stderr for r in added]
    assert "Added environment box (image localhost/nanum-test-busybox:1 (podman)) for everyone" in added[0].stdout

    in_box = box.submit("alice", "-E", "box", "--dataset", "tiny", "--", "sh", "-c",
                        'id -u; echo "gpus=$CUDA_VISIBLE_DEVICES"; cat "$NANUM_DATASET_TINY/train.txt"; '
                        'touch "$NANUM_DATASET_TINY/mine" 2>&1 || echo "write refused"', cwd=workdir)
    in_venv = box.submit("alice", "--environment", "venv", "--", "python3", "-c",
                         "import sys, os; print(sys.prefix, os.environ['VIRTUAL_ENV'])", cwd=workdir)
    script = workdir / "train.sh"
    script.write_text('#!/bin/sh\n#NANUM -E cuda --gpus 0\necho "CUDA_HOME=$CUDA_HOME"\n')
    behind = box.submit("alice", str(script), cwd=workdir)
    for job_id in (in_box, in_venv, behind):
        assert box.wait_state(job_id, "completed", "failed", timeout=60)["state"] == "completed", logs(box, job_id)

    lines = logs(box, in_box).splitlines()
    assert lines[:3] == [str(uid), "gpus=0", "cats and dogs"] and lines[-1] == "write refused", lines
    assert not (data / "mine").exists()
    assert logs(box, in_venv).split() == [str(venv), str(venv)]
    assert logs(box, behind).strip() == "CUDA_HOME=/opt/cuda-12.4"
    listed = json.loads(box.nanum("environment", "list", "--json").stdout)
    assert {e["name"]: e["uses"] for e in listed} == {"box": 1, "cuda": 1, "venv": 1}


def test_a_job_whose_dataset_no_node_has_waits_saying_so(box: Cluster, workdir: Path) -> None:
    assert box.nanum("dataset", "add", "ghost", "/nonexistent/ghost").returncode == 0
    job_id = box.submit("alice", "--dataset", "ghost", "--", "true", cwd=workdir)
    deadline = time.monotonic() + 20
    while (job := box.job(job_id))["reason"] != "dataset ghost (/nonexistent/ghost) not on any node":
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    assert job["state"] == "pending"
    shown = box.nanum("show", str(job_id)).stdout
    assert "dataset ghost (/nonexistent/ghost) not on any node" in shown


# -- two nodes, one checkpoint root -------------------------------------------------------------------------------

#: Counts to 20 steps, saving each in its checkpoint directory; the first run stops at step 10 until it is killed.
RESUMABLE = (
    'step=$(cat "$NANUM_CHECKPOINT_DIR/step" 2>/dev/null || echo 0); echo "start at step $step"; '
    'while [ "$step" -lt 20 ]; do step=$((step + 1)); echo "$step" > "$NANUM_CHECKPOINT_DIR/step"; '
    'if [ "$step" -eq 10 ] && [ ! -e "$NANUM_CHECKPOINT_DIR/paused" ]; then '
    'touch "$NANUM_CHECKPOINT_DIR/paused"; sleep 600; fi; done; echo "done at step $step"'
)


def test_a_job_resumes_from_its_checkpoint_on_another_node_and_a_node_without_podman_is_passed_over(
    tmp_path: Path, workdir: Path, podman: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in podman.items():
        monkeypatch.setenv(key, value)  # the agents' environment: they pass it on to podman
    ckpt = shared_dir("envs-e2e-ckpt-")
    server = ServerProc(tmp_path, ("--lease", str(LEASE_S), "--grace", str(GRACE_S), "--checkpoint-root", str(ckpt)))
    server.start()
    agents = []
    try:
        for name, runtime in (("plain", "none"), ("boxy", "podman")):
            token = server.api("POST", "/nodes", {"name": name})["token"]
            agents.append(AgentProc(name, server.url, token, tmp_path,
                                    args=("--checkpoint-root", str(ckpt), "--container-runtime", runtime)))
        alice = server.api("POST", "/users", {"name": "alice", "labs": ["vision"], "unix_user": job_account()})["token"]
        server.api("POST", "/environments", {"name": "box", "image": IMAGE})
        plain, boxy = agents
        plain.start()
        wait_until(lambda: any(n["state"] == "up" for n in server.api("GET", "/nodes")), server)

        # Only the node without a container runtime is up: the image job waits, saying why.
        boxed = submit(server, alice, ["sh", "-c", "id -u"], workdir, environment="box")
        reason = "no node has a container runtime (podman or docker) for environment box"
        wait_until(lambda: job(server, alice, boxed)["reason"] == reason, server)
        boxy.start()
        wait_until(lambda: job(server, alice, boxed)["state"] == "completed", server)
        assert job(server, alice, boxed)["allocation"][0]["node"] == "boxy"

        # A job saves steps under the shared root; its node dies; it resumes where it was on the other node.
        resumable = submit(server, alice, ["sh", "-c", RESUMABLE], workdir)
        wait_until(lambda: (ckpt / str(resumable) / "paused").exists(), server)
        first = job(server, alice, resumable)["allocation"][0]["node"]
        dead = next(a for a in agents if a.name == first)
        dead.kill()  # its guard stops the job when the lease runs out; the server then requeues it
        wait_until(lambda: job(server, alice, resumable)["state"] == "completed", server, timeout=60)
        done = job(server, alice, resumable)
        assert done["runs"] == 2 and done["allocation"][0]["node"] != first
        log = read_log(server, alice, resumable)
        # (the first run's output died with its node: it never reached the server)
        assert "start at step 10" in log and "done at step 20" in log, log
        listed = server.api("GET", f"/jobs/{resumable}/checkpoints", token=alice)
        assert {f["path"] for f in listed["files"]} == {"step", "paused"}
        assert os.stat(ckpt / str(resumable)).st_mode & 0o777 == 0o700
        assert os.stat(ckpt / str(resumable)).st_uid == pwd.getpwnam(job_account()).pw_uid
    finally:
        for agent in agents:
            agent.kill()
            kill_job_processes(agent.state_dir)
        server.kill()
        remove(ckpt)


def submit(server: ServerProc, token: str, command: list[str], workdir: Path, **fields: object) -> int:
    body = {"command": command, "gpus": 1, "workdir": str(workdir), **fields}
    return int(server.api("POST", "/jobs", body, token=token)["id"])


def job(server: ServerProc, token: str, job_id: int) -> dict[str, object]:
    return dict(server.api("GET", f"/jobs/{job_id}", token=token))


def read_log(server: ServerProc, token: str, job_id: int) -> str:
    request = urllib.request.Request(f"{server.url}/api/v1/jobs/{job_id}/logs",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return str(r.read().decode())


def wait_until(check: object, server: ServerProc, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {timeout} s:\n{server.log_tail()}"
        time.sleep(0.1)


def test_a_shell_runs_in_an_image_as_its_user_on_a_real_terminal(box: Cluster, workdir: Path) -> None:
    import pexpect

    from tests.e2e.cluster import nanum_command

    uid = pwd.getpwnam(job_account()).pw_uid
    added = box.nanum("environment", "add", "box", "--image", IMAGE, "--runtime", "podman")
    assert added.returncode == 0, added.stderr
    command = nanum_command()
    child = pexpect.spawn(command[0], [*command[1:], "shell", "-E", "box", "--gpus", "1"],
                          env=box.env(box.tokens["alice"]), cwd=str(workdir), encoding="utf-8", timeout=60)
    try:
        child.expect(r"Shell (\d+) on ")
        job_id = int(child.match.group(1))
        child.expect_exact("$ ")
        child.sendline('echo "uid=$(id -u) tty=$(tty) secret=[$NANUM_RELAY_SECRET]"; exit 3')
        child.expect(r"uid=(\d+) tty=(\S+) secret=\[(.*?)\]")
        assert child.match.group(1) == str(uid)  # inside the image, as alice's account
        assert child.match.group(2).startswith("/dev/pts/")  # a real terminal
        assert child.match.group(3) == ""  # the relay's secret stays with the relay
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 3, child.before
    job = box.wait_state(job_id, "failed", timeout=30)
    assert job["exit_code"] == 3 and job["kind"] == "shell"
    left = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], env={**os.environ, **box.extra_env},
                          capture_output=True, text=True)
    assert f"nanum-job-{job_id}-" not in left.stdout  # the container is gone with the job


def test_closing_the_terminal_of_a_shell_in_an_image_ends_it_and_its_container(box: Cluster, workdir: Path) -> None:
    import pexpect

    from tests.e2e.cluster import nanum_command

    assert box.nanum("environment", "add", "box", "--image", IMAGE, "--runtime", "podman").returncode == 0
    command = nanum_command()
    child = pexpect.spawn(command[0], [*command[1:], "shell", "-E", "box", "--gpus", "1"],
                          env=box.env(box.tokens["alice"]), cwd=str(workdir), encoding="utf-8", timeout=60)
    child.expect(r"Shell (\d+) on ")
    job_id = int(child.match.group(1))
    child.expect_exact("$ ")
    child.sendline("echo 'sleep'ing; sleep 600")
    child.expect_exact("sleeping")
    child.close(force=True)  # the terminal goes away
    job = box.wait_state(job_id, "failed", "completed", timeout=60)
    assert job["exit_code"] is not None and job["exit_code"] != 0
    assert all(gpu["job_id"] != job_id for node in box.api("GET", "/nodes") for gpu in node["gpus"])
    for _ in range(100):  # the runtime removes the container in the background
        left = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], env={**os.environ, **box.extra_env},
                              capture_output=True, text=True)
        if f"nanum-job-{job_id}-" not in left.stdout:
            break
        time.sleep(0.1)
    assert f"nanum-job-{job_id}-" not in left.stdout
