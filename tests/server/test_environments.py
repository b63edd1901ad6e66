"""Environments, datasets and checkpoint listings through the API: who may add, see and remove them, what a job
submitted with them carries to its agent, and why it waits when no node has what it needs."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from nanum.protocol import NodeInfo
from nanum.server.context import ServerContext
from nanum.server.services import accounts, checkpoints
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent


@dataclass
class Node(FakeAgent):
    """A fake agent that also reports container runtimes and the paths it has."""

    runtimes: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    def info(self) -> NodeInfo:
        return super().info().model_copy(update={"runtimes": self.runtimes, "paths": self.paths})


def node(client: AsgiClient, ctx: ServerContext, name: str, **kw: list[str]) -> Node:
    n = Node(client, name, accounts.add_node(ctx, name), gpus=4, **kw)  # type: ignore[arg-type]
    n.beat()
    return n


def add_env(client: AsgiClient, token: str = ALICE, **body: object) -> tuple[int, dict[str, object]]:
    r = client.post("/api/v1/environments", json=body, headers=auth(token))
    return r.status_code, r.json()


def test_a_member_adds_an_environment_for_their_lab_which_only_that_lab_sees_and_uses(client: AsgiClient) -> None:
    status, env = add_env(client, name="torch", image="localhost/torch:2.4", runtime="podman", description="CUDA 12")
    assert status == 201 and env["lab"] == "vision" and env["owner"] == "alice" and env["uses"] == 0
    assert [e["name"] for e in client.get("/api/v1/environments", headers=auth(BOB)).json()] == ["torch"]
    client.post("/api/v1/labs", json={"name": "other"}, headers=auth(ADMIN))
    accounts_user = {"name": "carol", "labs": ["other"]}
    token = client.post("/api/v1/users", json=accounts_user, headers=auth(ADMIN)).json()["token"]
    assert client.get("/api/v1/environments", headers=auth(token)).json() == []
    assert client.get("/api/v1/environments/torch", headers=auth(token)).status_code == 404
    refused = client.post("/api/v1/jobs", json={"command": ["x"], "environment": "torch"}, headers=auth(token))
    assert refused.status_code == 400 and "no environment named torch" in refused.json()["detail"]
    j = submit(client, environment="torch")
    assert j["environment"] == "torch"
    assert client.get("/api/v1/environments/torch", headers=auth(ALICE)).json()["uses"] == 1


def test_environments_for_everyone_are_an_admins_and_bad_ones_are_refused_in_words(client: AsgiClient) -> None:
    assert add_env(client, name="global", python="/opt/envs/torch", lab=None)[1]["lab"] == "vision"
    status, env = add_env(client, ADMIN, name="cuda", setup="module load cuda/12.4")
    assert status == 201 and env["lab"] is None
    cases = [
        ({"name": "x", "image": "a", "python": "/opt/p"}, "not both"),
        ({"name": "x"}, "give an image"),
        ({"name": "x", "python": "relative/path"}, "absolute path"),
        ({"name": "x", "image": "--privileged"}, "image"),
        ({"name": "x", "setup": "true", "runtime": "podman"}, "only for a container image"),
        ({"name": "x", "image": "a", "lab": "nlp"}, "not a member of lab nlp"),
        ({"name": "cuda", "setup": "true"}, "already exists"),
    ]
    for body, words in cases:
        status, out = add_env(client, **body)
        assert status in (400, 403, 409, 422) and words in str(out), (body, out)


def test_only_the_owner_a_lab_manager_or_an_admin_removes_an_environment(client: AsgiClient) -> None:
    add_env(client, name="mine", setup="true")
    assert client.request("DELETE", "/api/v1/environments/mine", headers=auth(BOB)).status_code == 403
    assert client.request("DELETE", "/api/v1/environments/mine", headers=auth(ALICE)).status_code == 204
    assert client.request("DELETE", "/api/v1/environments/mine", headers=auth(ALICE)).status_code == 404


def test_datasets_are_added_by_admins_and_reach_the_job_with_its_environment(
    client: AsgiClient, ctx: ServerContext
) -> None:
    body = {"name": "imagenet-1k", "path": "/data/imagenet/", "description": "ILSVRC 2012"}
    assert client.post("/api/v1/datasets", json=body, headers=auth(ALICE)).status_code == 403
    r = client.post("/api/v1/datasets", json=body, headers=auth(ADMIN))
    assert r.status_code == 201 and r.json()["path"] == "/data/imagenet"
    assert r.json()["variable"] == "NANUM_DATASET_IMAGENET_1K"
    add_env(client, name="venv", python="/opt/envs/torch", setup="module load cuda/12.4")
    gpu = node(client, ctx, "gpu-01", paths=["/opt/envs/torch", "/data/imagenet"])
    j = submit(client, environment="venv", datasets=["imagenet-1k"])
    tick(client)
    launch = gpu.beat().desired[0]
    assert launch.job_id == j["id"] and launch.environment == "venv"
    assert launch.environment_spec is not None and launch.environment_spec.python == "/opt/envs/torch"
    assert launch.environment_spec.setup == "module load cuda/12.4"
    assert launch.datasets == {"imagenet-1k": "/data/imagenet"}
    assert set(gpu.last.check_paths or ()) == {"/opt/envs/torch", "/data/imagenet"}  # type: ignore[union-attr]
    assert client.get("/api/v1/datasets", headers=auth(BOB)).json()[0]["uses"] == 1
    unknown = client.post("/api/v1/jobs", json={"command": ["x"], "datasets": ["nope"]}, headers=auth(ALICE))
    assert unknown.status_code == 400 and "no dataset named nope" in unknown.json()["detail"]


def test_a_job_waits_with_the_reason_while_no_node_has_its_runtime_or_paths(
    client: AsgiClient, ctx: ServerContext
) -> None:
    add_env(client, name="torch-2.4", image="localhost/torch:2.4", runtime="podman")
    add_env(client, name="venv", python="/opt/envs/torch")
    client.post("/api/v1/datasets", json={"name": "coco", "path": "/data/coco"}, headers=auth(ADMIN))
    bare = node(client, ctx, "gpu-01", runtimes=["docker"])
    image = submit(client, environment="torch-2.4")
    venv = submit(client, environment="venv")
    data = submit(client, datasets=["coco"])
    tick(client)
    assert job(client, image["id"])["reason"] == "no node has podman for environment torch-2.4"
    assert job(client, venv["id"])["reason"] == "python environment /opt/envs/torch not on any node"
    assert job(client, data["id"])["reason"] == "dataset coco (/data/coco) not on any node"
    assert all(job(client, j["id"])["state"] == "pending" for j in (image, venv, data))
    ready = node(client, ctx, "gpu-02", runtimes=["podman"], paths=["/opt/envs/torch", "/data/coco"])
    tick(client)
    assert {d.job_id for d in ready.beat().desired} == {image["id"], venv["id"], data["id"]}
    assert bare.beat().desired == []


def test_checkpoints_list_a_jobs_files_for_its_owner_and_go_after_the_retention(
    client: AsgiClient, ctx: ServerContext
) -> None:
    gpu = node(client, ctx, "gpu-01")
    j = submit(client)
    tick(client)
    gpu.beat()
    directory = ctx.settings.checkpoints_dir / str(j["id"])
    (directory / "step").mkdir(parents=True)
    (directory / "step" / "model.pt").write_bytes(b"x" * 1234)
    (directory / ".checkpoint").touch()
    listed = client.get(f"/api/v1/jobs/{j['id']}/checkpoints", headers=auth(ALICE)).json()
    assert [(f["path"], f["size"]) for f in listed["files"]] == [(".checkpoint", 0), ("step/model.pt", 1234)]
    assert client.get(f"/api/v1/jobs/{j['id']}/checkpoints", headers=auth(BOB)).status_code == 403
    gpu.exit(j["id"], code=0)
    gpu.beat()
    assert checkpoints.prune(ctx, time.time()) == []  # ended just now: kept for the retention period
    assert checkpoints.prune(ctx, time.time() + ctx.settings.checkpoint_retention_s + 1) == [j["id"]]
    assert not os.path.exists(directory)
