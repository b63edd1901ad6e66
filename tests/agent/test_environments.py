"""Jobs in their environments on one node: a Python environment first on PATH, a setup line run first in the
job's shell, datasets in NANUM_DATASET_*, and container images run by Podman as the job's user with datasets
read-only; what a node lacks fails the job with that reason."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nanum.agent.environments import Containers, container_name, container_sessions, find_runtimes
from nanum.agent.executor import Executor
from nanum.agent.monitor import JobReader, JobView
from nanum.protocol import EnvironmentSpec, JobStatus
from tests.agent.conftest import NODE, make_launch
from tests.containers import IMAGE, podman_env, podman_missing, remove_store
from tests.e2e.cluster import job_account


def run(executor: Executor, job_id: int, tmp_path: Path, *command: str, **fields: object) -> tuple[JobStatus, str]:
    executor.start(allow_root=True, launch=make_launch(job_id, *command, workdir=str(tmp_path), **fields))
    status = executor.wait(job_id, 30)
    assert status is not None
    return status, executor.read_log(job_id, 0, 1 << 20)[0]


def test_a_python_environment_comes_first_on_path_after_the_setup_line(executor: Executor, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\necho \"the venv's python, $GREETING\"\n")
    (venv / "bin" / "python").chmod(0o755)
    spec = EnvironmentSpec(python=str(venv), setup="export GREETING=set-up-first")
    status, log = run(executor, 1, tmp_path, "sh", "-c", 'python; echo "VIRTUAL_ENV=$VIRTUAL_ENV"',
                      environment="venv", environment_spec=spec)
    assert status.exit_code == 0, status
    assert log.splitlines() == ["the venv's python, set-up-first", f"VIRTUAL_ENV={venv}"]


def test_datasets_are_named_in_variables_and_a_missing_one_fails_the_job_saying_which(
    executor: Executor, tmp_path: Path
) -> None:
    status, log = run(executor, 2, tmp_path, "sh", "-c", 'echo "$NANUM_DATASET_IMAGENET_1K"',
                      datasets={"imagenet-1k": str(tmp_path)})
    assert status.exit_code == 0 and log.strip() == str(tmp_path)
    status, _ = run(executor, 3, tmp_path, "true", datasets={"coco": "/no/such/coco"})
    assert status.state == "failed_to_start" and status.reason == f"dataset coco (/no/such/coco) is not on node {NODE}"
    spec = EnvironmentSpec(python="/no/such/venv")
    status, _ = run(executor, 4, tmp_path, "true", environment="venv", environment_spec=spec)
    assert status.reason == f"python environment /no/such/venv is not on node {NODE}"


# -- containers -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def podman() -> Iterator[dict[str, str]]:
    if (why := podman_missing()) is not None:
        pytest.skip(why)
    root = Path(tempfile.mkdtemp(prefix="envs-podman-", dir="/tmp"))  # short: see `podman_env`
    env = podman_env(root)
    yield env
    remove_store(root, env)


@pytest.fixture
def boxed(podman: dict[str, str], state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Executor]:
    for key, value in podman.items():
        monkeypatch.setenv(key, value)
    runtimes = find_runtimes("podman")
    assert runtimes, "podman does not answer with the test's configuration"
    ex = Executor(state_dir, NODE, containers=Containers(runtimes, simulated_gpus=True))
    yield ex
    for job_id, state in ex.held().items():
        if state == "running":
            ex.stop(job_id, 0.0)
            ex.wait(job_id, 10)
    ex.close()


@pytest.fixture
def public(tmp_path: Path) -> Iterator[Path]:
    """A directory the job's user may enter (pytest's own are its owner's alone)."""
    path = Path(tempfile.mkdtemp(prefix="envs-agent-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def shared(parent: Path, name: str) -> Path:
    path = parent / name
    path.mkdir()
    path.chmod(0o777)
    return path


def test_an_image_runs_the_job_as_its_user_with_datasets_read_only(boxed: Executor, public: Path) -> None:
    user = pwd.getpwnam(job_account())
    work, data, ckpt = shared(public, "work"), shared(public, "data"), public / "ckpt"
    (data / "train.txt").write_text("cats\n")
    script = ('id -u; id -g; pwd; cat "$NANUM_DATASET_TINY/train.txt"; echo "gpus=$CUDA_VISIBLE_DEVICES"; '
              'touch "$NANUM_DATASET_TINY/x" 2>/dev/null && echo wrote || echo read-only; '
              'echo saved > "$NANUM_CHECKPOINT_DIR/step"; echo "$GREETING"')
    spec = EnvironmentSpec(image=IMAGE, runtime="podman", setup="export GREETING=from-setup")
    boxed.start(launch=make_launch(10, "sh", "-c", script, workdir=str(work), unix_user=user.pw_name, gpus=[1],
                                   environment="box", environment_spec=spec, datasets={"tiny": str(data)},
                                   checkpoint_dir=str(ckpt)))
    status = boxed.wait(10, 60)
    log = boxed.read_log(10, 0, 1 << 20)[0]
    assert status is not None and status.exit_code == 0, (status, log)
    assert log.splitlines() == [str(user.pw_uid), str(user.pw_gid), str(work), "cats", "gpus=1", "read-only",
                                "from-setup"]
    assert (ckpt / "step").read_text() == "saved\n" and (ckpt / "step").stat().st_uid == user.pw_uid


def test_an_image_that_is_not_on_the_node_fails_the_job_with_that_reason(boxed: Executor, public: Path) -> None:
    spec = EnvironmentSpec(image="localhost/not-here:1")
    boxed.start(launch=make_launch(11, "true", workdir=str(public), unix_user=job_account(), environment="gone",
                                   environment_spec=spec))
    status = boxed.status(11)
    assert status is not None and status.state == "failed_to_start"
    assert status.reason is not None and status.reason.startswith(
        f"image localhost/not-here:1 of environment gone is not on node {NODE}")


def test_a_stopped_container_job_ends_within_its_grace_and_leaves_no_container(
    boxed: Executor, public: Path, podman: dict[str, str]
) -> None:
    spec = EnvironmentSpec(image=IMAGE)
    work = shared(public, "work")
    script = 'trap "echo stopping; exit 3" TERM; echo ready > ready; while :; do sleep 0.1; done'
    boxed.start(launch=make_launch(12, "sh", "-c", script, workdir=str(work), unix_user=job_account(),
                                   environment="box", environment_spec=spec, grace_s=10))
    deadline = time.monotonic() + 60  # a container's start takes seconds on a busy machine
    while not (work / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (work / "ready").exists(), boxed.read_log(12, 0, 1 << 20)[0]  # its trap is set: a stop now is seen
    boxed.stop(12)
    status = boxed.wait(12, 20)
    assert status is not None and status.exit_code == 3 and not status.signal, status
    left = subprocess.run(["podman", "ps", "-a", "-q"], env={**os.environ, **podman}, capture_output=True, text=True)
    assert left.stdout.strip() == "" or shutil.which("podman") is None


def test_a_container_job_is_held_to_its_memory_where_the_node_enforces_limits(
    podman: dict[str, str], state_dir: Path, public: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in podman.items():
        monkeypatch.setenv(key, value)
    ex = Executor(state_dir, NODE, containers=Containers(find_runtimes("podman"), simulated_gpus=True, limits=True))
    try:
        script = "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
        ex.start(launch=make_launch(13, "sh", "-c", script, workdir=str(shared(public, "work")), memory_mb=64,
                                    unix_user=job_account(), environment="box", environment_spec=EnvironmentSpec(
                                        image=IMAGE)))
        status = ex.wait(13, 60)
        log = ex.read_log(13, 0, 1 << 20)[0]
        assert status is not None and status.exit_code == 0, (status, log)
        assert log.strip() == str(64 * 1024 * 1024)
    finally:
        ex.close()


def test_a_container_jobs_processes_count_as_the_jobs_own(boxed: Executor, public: Path) -> None:
    """Their CPU is the job's, and a GPU process among them would be the job's, not someone bypassing the queue."""
    spec = EnvironmentSpec(image=IMAGE)
    work = shared(public, "work")
    launch = make_launch(14, "sh", "-c", "echo ready > ready; while :; do :; done", workdir=str(work),
                         unix_user=job_account(), environment="box", environment_spec=spec)
    boxed.start(launch=launch)
    for _ in range(200):
        if (work / "ready").exists():
            break
        time.sleep(0.05)
    inside = container_sessions({container_name(launch): 14})
    assert inside and set(inside.values()) == {14}
    ((_, pid, _),) = boxed.running()
    with_container, session_alone = JobReader(), JobReader()
    views = [JobView(14, pid, (0,), sessions=tuple(inside))]
    with_container.read(views, time.time())
    session_alone.read([JobView(14, pid, (0,))], time.time())
    time.sleep(0.5)
    (sample,), owners = with_container.read(views, time.time())
    (alone,), _ = session_alone.read([JobView(14, pid, (0,))], time.time())
    assert sample.cpu_percent > 10, sample  # the busy loop in the container
    assert alone.cpu_percent < 5, alone  # the job's own session alone: the runtime's client, idle
    assert all(owners[s] == 14 for s in inside)


def test_real_gpus_reach_a_container_through_cdi_or_dockers_gpus_option() -> None:
    from nanum.agent.environments import _gpu_options

    assert _gpu_options("podman", [0, 3], simulated=False) == ["--device", "nvidia.com/gpu=0",
                                                                "--device", "nvidia.com/gpu=3"]
    assert _gpu_options("docker", [0, 3], simulated=False) == ["--gpus", '"device=0,3"']
    assert _gpu_options("podman", [1], simulated=True) == []  # simulated GPUs: nothing to pass
