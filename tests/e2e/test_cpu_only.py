"""A job that needs no GPU, through the real `nanum` commands against a real `nanum up` with simulated GPUs: it
runs on a GPU node without seeing any GPU, completes, and another one is cancelled like any job."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_a_job_needing_no_gpu_completes_and_another_is_cancelled(cluster: Cluster, workdir: Path) -> None:
    done = cluster.submit("alice", "--gpus", "0", "--cpus", "0", "--", "sh", "-c",
                          'echo "gpus=[$CUDA_VISIBLE_DEVICES]" > seen', cwd=workdir)
    waited = cluster.nanum("wait", str(done), "--timeout", "30", user="alice")
    assert waited.returncode == 0, waited.stderr
    assert (workdir / "seen").read_text().strip() == "gpus=[]"
    assert cluster.job(done)["state"] == "completed"

    long = cluster.submit("bob", "--gpus", "0", "--cpus", "0", "--", "sleep", "120", cwd=workdir)
    cluster.wait_state(long, "running")
    nodes = cluster.api("GET", "/nodes")
    assert all(g["job_id"] != long for n in nodes for g in n["gpus"])  # it holds no GPU
    cancelled = cluster.nanum("cancel", str(long), user="bob")
    assert cancelled.returncode == 0, cancelled.stderr
    assert cluster.wait_state(long, "cancelled", timeout=30)["state"] == "cancelled"
    full = cluster.submit("carol", "--gpus", "4", "--cpus", "0", "--", "true", cwd=workdir)
    assert cluster.nanum("wait", str(full), "--timeout", "30", user="carol").returncode == 0
