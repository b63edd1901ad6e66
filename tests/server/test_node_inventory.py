"""A heartbeat cannot change a registered node's GPUs without an admin: against the real app and database, an agent
(or someone holding its token) that reports more GPUs, or other models or uuids, gets no job on them until an
admin accepts; a GPU that disappears is out at once."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest
from sqlalchemy import select

from nanum.protocol import GpuInfo, NodeInfo
from nanum.server.context import ServerContext
from nanum.store import AuditRow
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent


@dataclass
class ForgedAgent(FakeAgent):
    """Reports the node's own GPUs, with other uuids at `swapped` indices, plus `extra` GPUs of `extra_model`."""

    extra: int = 0
    extra_model: str = "H100"
    swapped: set[int] = field(default_factory=set)

    def info(self) -> NodeInfo:
        real = super().info()
        gpus = [g.model_copy(update={"uuid": "GPU-forged"}) if g.index in self.swapped else g for g in real.gpus]
        gpus += [GpuInfo(index=self.gpus + i, uuid=f"GPU-fake-{i}", model=self.extra_model, memory_mb=81920)
                 for i in range(self.extra)]
        return real.model_copy(update={"gpus": gpus})


def nodes(client: AsgiClient) -> dict[str, dict[str, object]]:
    return {n["name"]: n for n in client.get("/api/v1/nodes", headers=auth(BOB)).json()}


def indices(gpus: object) -> list[int]:
    assert isinstance(gpus, list)
    return [g["index"] for g in gpus]


def audit(ctx: ServerContext) -> list[tuple[str, str]]:
    with ctx.db.read() as s:
        return [(r.actor, r.action) for r in s.scalars(select(AuditRow).where(AuditRow.kind == "node"))]


def test_a_forged_heartbeat_with_more_gpus_gets_no_job_on_them_until_an_admin_accepts(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent, caplog: pytest.LogCaptureFixture
) -> None:
    forged = ForgedAgent(client, "gpu-01", agent.token, extra=60)
    with caplog.at_level(logging.WARNING, logger="nanum.nodes"):
        forged.beat()
        forged.beat()
    node = nodes(client)["gpu-01"]
    assert indices(node["gpus"]) == [0, 1, 2, 3] and indices(node["unaccepted_gpus"]) == list(range(4, 64))
    warned = [r.getMessage() for r in caplog.records if "not accepted" in r.getMessage()]
    assert warned == [
        "node gpu-01 reports 60 GPUs (60×H100) it was not accepted with; they are not scheduled until an admin "
        "runs `nanum node accept gpu-01`"
    ]
    assert audit(ctx) == [("nanum", "mismatch")]

    jobs = [submit(client, gpus=1) for _ in range(8)]
    tick(client)
    assert [job(client, j["id"])["state"] for j in jobs].count("running") == 4
    assert sorted(g for launch in forged.beat().desired for g in launch.gpus) == [0, 1, 2, 3]
    refused = client.post("/api/v1/jobs", json={"command": ["x"], "gpu_model": "H100"}, headers=auth(ALICE))
    assert refused.status_code == 400 and "H100" in refused.json()["detail"]

    assert client.post("/api/v1/nodes/gpu-01/accept", headers=auth(BOB)).status_code == 403
    accepted = client.post("/api/v1/nodes/gpu-01/accept", headers=auth(ADMIN))
    assert accepted.status_code == 200, accepted.text
    assert indices(accepted.json()["gpus"]) == list(range(64)) and accepted.json()["unaccepted_gpus"] == []
    assert audit(ctx) == [("nanum", "mismatch"), ("admin", "accept")]
    tick(client)
    assert all(job(client, j["id"])["state"] == "running" for j in jobs)
    again = client.post("/api/v1/nodes/gpu-01/accept", headers=auth(ADMIN))
    assert again.status_code == 409 and again.json()["detail"] == (
        "node gpu-01 reports no GPU beyond those accepted; there is nothing to accept"
    )


def test_a_gpu_that_disappears_is_out_at_once_and_back_when_it_returns(client: AsgiClient, agent: FakeAgent) -> None:
    agent.gpus = 3
    agent.beat()
    node = nodes(client)["gpu-01"]
    assert indices(node["gpus"]) == [0, 1, 2] and node["unaccepted_gpus"] == []
    jobs = [submit(client, gpus=1) for _ in range(4)]
    tick(client)
    assert [job(client, j["id"])["state"] for j in jobs].count("running") == 3
    agent.gpus = 4  # the same GPU again: it was accepted before
    agent.beat()
    tick(client)
    assert all(job(client, j["id"])["state"] == "running" for j in jobs)


def test_another_gpu_at_a_known_index_is_held_back(client: AsgiClient, ctx: ServerContext, agent: FakeAgent) -> None:
    swapped = ForgedAgent(client, "gpu-01", agent.token, swapped={2})
    swapped.beat()
    node = nodes(client)["gpu-01"]
    assert indices(node["gpus"]) == [0, 1, 3] and indices(node["unaccepted_gpus"]) == [2]
    same_count = ForgedAgent(client, "gpu-01", agent.token, gpus=0, extra=4, extra_model="A100")
    same_count.beat()  # four A100s again, but not the ones accepted
    assert nodes(client)["gpu-01"]["gpus"] == []
    assert audit(ctx) == [("nanum", "mismatch"), ("nanum", "mismatch")]


def test_accepting_an_unknown_node_is_404(client: AsgiClient) -> None:
    r = client.post("/api/v1/nodes/nope/accept", headers=auth(ADMIN))
    assert r.status_code == 404 and r.json()["detail"] == "no node named nope; `nanum nodes` lists them"
