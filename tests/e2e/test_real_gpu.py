"""On a machine with NVIDIA GPUs: `nanum up` without `--simulate-gpus` finds them through NVML as `nvidia-smi`
lists them, their health checks read clean, and a real CUDA job runs as its owner's account on the GPU it was
given, while the node reports that GPU busy with that job's process. Skipped where NVML sees no GPU; simulated
GPUs are tested everywhere else."""

from __future__ import annotations

import json
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nanum.agent.gpus import discover_nvml
from nanum.agent.health import NvmlHealth
from tests.e2e.cluster import Cluster, job_account

GPUS = discover_nvml()

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not GPUS, reason="needs an NVIDIA GPU and its driver (NVML sees none here)"),
]

# Ten seconds of matrix products on the one GPU the job was given, then what the job saw.
CUDA_JOB = """
import os, time, torch
x = torch.randn(8192, 8192, device="cuda")
end = time.time() + 10
while time.time() < end:
    y = x @ x
    torch.cuda.synchronize()
print("visible", os.environ["CUDA_VISIBLE_DEVICES"])
print("device", torch.cuda.get_device_name(0))
print("count", torch.cuda.device_count())
print("uid", os.getuid())
"""


def cuda_python() -> tuple[str, str] | None:
    """This interpreter and the folder its PyTorch is imported from, where that PyTorch can use the GPU."""
    probe = subprocess.run(
        [sys.executable, "-c", "import os, torch; assert torch.cuda.is_available(); "
                               "print(os.path.dirname(os.path.dirname(torch.__file__)))"],
        capture_output=True, text=True, timeout=120,
    )
    return (sys.executable, probe.stdout.strip()) if probe.returncode == 0 else None


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path_factory.mktemp("nanum-gpu"), gpus=None, extra_env={"NANUM_SAMPLE_INTERVAL": "0.5"})
    try:
        cluster.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    cluster.add_user("alice", job_account(), "vision")
    try:
        yield cluster
    finally:
        cluster.stop()


def test_nvml_finds_the_gpus_nvidia_smi_lists() -> None:
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi is not installed")
    listed = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    rows = [[field.strip() for field in line.split(",")] for line in listed.strip().splitlines()]
    assert [(g.index, g.uuid, g.memory_mb) for g in GPUS] == [(int(i), u, int(m)) for i, u, _, m in rows]
    assert [g.model for g in GPUS] == [name.removeprefix("NVIDIA ").strip() for _, _, name, _ in rows]


def test_healthy_gpus_report_no_problem() -> None:
    health = NvmlHealth()
    try:
        assert len(health.handles) == len(GPUS)
        assert health.check() == []
        assert health.check() == []  # a second check reads the counters and the event set again
    finally:
        health.close()


def test_the_node_reports_its_real_gpus(gpu_cluster: Cluster) -> None:
    (node,) = gpu_cluster.api("GET", "/nodes")
    assert node["simulated"] is False
    assert [(g["index"], g["uuid"], g["model"]) for g in node["gpus"]] == [(g.index, g.uuid, g.model) for g in GPUS]
    assert all(g["health"] is None for g in node["gpus"])


def _held_gpu(cluster: Cluster, job_id: int) -> dict[str, Any] | None:
    for node in cluster.api("GET", "/nodes"):
        for gpu in node["gpus"]:
            if gpu["job_id"] == job_id:
                return dict(gpu)
    return None


def test_a_cuda_job_runs_as_its_owner_on_its_gpu_and_the_node_shows_it_busy(
    gpu_cluster: Cluster, workdir: Path
) -> None:
    found = cuda_python()
    if found is None:
        pytest.skip("this Python has no PyTorch that can use the GPU")
    python, site = found  # the job starts in its owner's environment, which need not find the same PyTorch
    (workdir / "job.py").write_text(CUDA_JOB)
    (workdir / "job.py").chmod(0o644)
    command = ["env", f"PYTHONPATH={site}", python, "job.py"]
    job_id = gpu_cluster.submit("alice", "--gpus", "1", "--name", "cuda", "--", *command, cwd=workdir)
    gpu_cluster.wait_state(job_id, "running", timeout=60)

    busy = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and gpu_cluster.api("GET", f"/jobs/{job_id}")["state"] == "running":
        gpu = _held_gpu(gpu_cluster, job_id)
        if gpu is not None and (gpu["util"] or 0) > 10:
            busy = gpu
            break
        time.sleep(0.5)
    if busy is None:
        logs = gpu_cluster.nanum("logs", str(job_id), user="alice")
        state = gpu_cluster.api("GET", f"/jobs/{job_id}")["state"]
        raise AssertionError(f"the GPU job {job_id} holds never showed its work; it is {state}, its output:\n"
                             f"{logs.stdout}{logs.stderr}\nnodes: {gpu_cluster.api('GET', '/nodes')}")
    assert busy["memory_used_mb"] > 0
    assert busy["outside"] == []  # the process on it is the job's own

    done = gpu_cluster.wait_state(job_id, "completed", "failed", timeout=120)
    logs = gpu_cluster.nanum("logs", str(job_id), user="alice")
    assert done["state"] == "completed", logs.stdout + logs.stderr
    seen = dict(line.split(" ", 1) for line in logs.stdout.splitlines() if " " in line)
    assert seen["visible"] == str(busy["index"])
    assert seen["count"] == "1"
    assert GPUS[busy["index"]].model in seen["device"]
    assert int(seen["uid"]) == pwd.getpwnam(job_account()).pw_uid != 0

    usage = gpu_cluster.api("GET", f"/jobs/{job_id}/usage")
    assert usage["gpu_util_peak"] > 10, json.dumps(usage)
