"""Node tokens and node inventories against a real `nanum up`: its local agent gets its token without showing it
to other users, and a heartbeat that claims GPUs a node was not registered with gets no job on them until an admin
runs `nanum node accept`."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from nanum.protocol import GpuInfo, Heartbeat, NodeInfo
from tests.e2e.cluster import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_the_local_agent_holds_its_node_token_out_of_its_command_line(cluster: Cluster) -> None:
    token = (cluster.home / "node-token").read_text().strip()
    pids = cluster.agent_pids()
    assert pids
    for pid in pids:
        assert token.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()


def beat(cluster: Cluster, token: str, gpus: list[GpuInfo]) -> None:
    info = NodeInfo(name="forged", hostname="forged", gpus=gpus, cpus=64, memory_mb=512_000, simulated=False,
                    unix_user="root")
    req = urllib.request.Request(f"{cluster.url}/api/v1/agent/heartbeat", method="POST",
                                 data=Heartbeat(node=info, jobs=[], logs=[]).model_dump_json().encode(),
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


def test_gpus_a_heartbeat_adds_are_used_only_once_an_admin_accepts_them(cluster: Cluster) -> None:
    added = cluster.nanum("node", "add", "forged")
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    beat(cluster, token, [GpuInfo(index=0, uuid="GPU-real-0", model="A100", memory_mb=40960)])
    fakes = [GpuInfo(index=1 + i, uuid=f"GPU-fake-{i}", model="H100", memory_mb=81920) for i in range(64)]
    beat(cluster, token, [GpuInfo(index=0, uuid="GPU-real-0", model="A100", memory_mb=40960), *fakes])

    shown = cluster.nanum("nodes", user="alice")
    assert ("! forged reports 64 GPUs it was not accepted with (H100); they are not used until an admin runs "
            "`nanum node accept forged`") in shown.stdout
    refused = cluster.nanum("submit", "--gpus", "1", "--gpu-model", "H100", "--", "true", user="alice")
    assert refused.returncode == 2 and "H100" in refused.stderr

    assert cluster.nanum("node", "accept", "forged", user="alice").returncode == 2  # admins only
    accepted = cluster.nanum("node", "accept", "forged")
    assert (accepted.returncode, accepted.stdout) == (0, "Node forged now schedules 65 GPUs.\n")
    forged = next(n for n in json.loads(cluster.nanum("nodes", "--json").stdout) if n["name"] == "forged")
    assert len(forged["gpus"]) == 65 and forged["unaccepted_gpus"] == []
