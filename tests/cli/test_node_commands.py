"""`nanum nodes` and `nanum node accept` against a scripted loopback server: a node whose agent reports GPUs it was
not accepted with says so under the table, and an admin accepts them in one command."""

from __future__ import annotations

from tests.cli.conftest import Nanum
from tests.cli.fakeapi import FakeApi

A100 = {"uuid": "u", "model": "A100", "memory_mb": 40960, "job_id": None, "user": None}


def node(name: str, gpus: int, unaccepted: int = 0) -> dict[str, object]:
    return {"name": name, "state": "up", "simulated": False, "cpus": 4, "memory_mb": 1024, "last_seen": None,
            "limits": "cgroup v2", "gpus": [{**A100, "index": i} for i in range(gpus)],
            "unaccepted_gpus": [{**A100, "index": gpus + i, "model": "H100"} for i in range(unaccepted)]}


def test_nodes_says_which_node_reports_gpus_it_was_not_accepted_with(api: FakeApi, nanum: Nanum) -> None:
    api.on("GET", "/nodes", [node("gpu-01", 4, unaccepted=60), node("gpu-02", 2)])
    result = nanum("nodes")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-1] == (
        "! gpu-01 reports 60 GPUs it was not accepted with (H100); they are not used until an admin runs "
        "`nanum node accept gpu-01`"
    )
    assert "gpu-02 reports" not in result.stdout


def test_node_accept_asks_the_server_and_says_how_many_gpus_are_scheduled(api: FakeApi, nanum: Nanum) -> None:
    api.on("POST", "/nodes/gpu-01/accept", node("gpu-01", 64))
    result = nanum("node", "accept", "gpu-01")
    assert (result.exit_code, result.stdout) == (0, "Node gpu-01 now schedules 64 GPUs.\n")
    api.on("POST", "/nodes/gpu-02/accept", {"detail": "node gpu-02 reports no GPU beyond those accepted; there is "
                                                      "nothing to accept"}, status=409)
    refused = nanum("node", "accept", "gpu-02")
    assert refused.exit_code == 2
    assert refused.stderr == ("nanum: error: node gpu-02 reports no GPU beyond those accepted; there is nothing to "
                              "accept\n")
