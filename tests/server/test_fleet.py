"""Running a fleet through the API: drain, resume and remove nodes; labels, GPU models and memory that jobs ask
for, with reasons naming what is missing; a lab's own nodes lent while idle and taken back; GPUs taken out of
service for the health problems their agents report."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from nanum.protocol import GpuProblem, HeartbeatReply, JobStatus
from nanum.server.context import ServerContext
from nanum.server.services import accounts
from nanum.store import EventRow
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent
from tests.server.test_web import get, login


def _node(client: AsgiClient, name: str) -> dict[str, Any]:
    return next(n for n in client.get("/api/v1/nodes", headers=auth(ALICE)).json() if n["name"] == name)


def _admin(client: AsgiClient, method: str, path: str, body: Any = None) -> Any:
    r = client.request(method, f"/api/v1/nodes/{path}", json=body, headers=auth(ADMIN))
    return r


def _agent(client: AsgiClient, ctx: ServerContext, name: str, gpus: int = 2, model: str = "A100") -> FakeAgent:
    node = FakeAgent(client, name, accounts.add_node(ctx, name), gpus=gpus, model=model)
    node.beat()
    return node


def _run(client: AsgiClient, *agents: FakeAgent) -> None:
    tick(client)
    for a in agents:
        a.beat()


def test_a_drained_node_finishes_its_jobs_takes_no_new_ones_and_comes_back_when_resumed(
    client: AsgiClient, agent: FakeAgent
) -> None:
    first = submit(client, gpus=1)["id"]
    _run(client, agent)
    assert job(client, first)["state"] == "running"
    r = _admin(client, "POST", "gpu-01/drain", {"reason": "new fans on Thursday"})
    assert r.status_code == 200 and r.json()["state"] == "draining", r.text
    second = submit(client, gpus=1)["id"]
    _run(client, agent)
    assert job(client, first)["state"] == "running"
    waiting = job(client, second)
    assert waiting["state"] == "pending" and "draining" in str(waiting["reason"]), waiting
    agent.exit(first)
    _run(client, agent)
    node = _node(client, "gpu-01")
    assert (node["state"], node["drain_reason"]) == ("drained", "new fans on Thursday")
    assert job(client, second)["state"] == "pending"
    page = get(client, "/nodes", login(client, ALICE)).text  # the dashboard's Nodes page says so too
    assert ">drained</span>" in page and "Drained: new fans on Thursday" in page
    # Its GPUs are drained, not down: a planned drain is no outage, and alerts on GPUs down must not fire for it.
    totals = get(client, "/ui/cluster.json", login(client, ALICE)).json()["totals"]
    assert (totals["drained"], totals["down"], totals["free"]) == (4, 0, 0), totals
    assert 'nanum_gpus{state="drained"} 4.0' in client.get("/metrics").text

    agent.beat()  # a drain outlives the agent's heartbeats (and the node going silent and coming back)
    assert _node(client, "gpu-01")["state"] == "drained"
    r = _admin(client, "POST", "gpu-01/resume")
    assert r.status_code == 200 and r.json()["state"] == "up" and r.json()["drain_reason"] is None
    _run(client, agent)
    assert job(client, second)["state"] == "running"
    again = _admin(client, "POST", "gpu-01/resume")
    assert again.status_code == 409 and "nothing to resume" in again.json()["detail"]


def test_a_node_that_cannot_start_jobs_for_its_own_fault_is_drained_and_its_jobs_run_elsewhere(
    client: AsgiClient, ctx: ServerContext
) -> None:
    """Its disk is full: the job it could not start runs on another node (one submitted with --no-requeue fails),
    and no more jobs are sent to it, where each would fail the same way, until an admin resumes it."""
    full, other = _agent(client, ctx, "full", gpus=2), _agent(client, ctx, "other", gpus=1)
    _admin(client, "POST", "other/drain", {"reason": "kept free until the full node has taken its jobs"})
    moved, kept_here = submit(client, gpus=1)["id"], submit(client, gpus=1, requeue=False)["id"]
    _run(client, full)
    said = "the agent could not start the job: No space left on device"
    for job_id in (moved, kept_here):
        full.running.pop(job_id)
        full.exited[job_id] = JobStatus(job_id=job_id, state="failed_to_start", reason=said, node_fault=True)
    _admin(client, "POST", "other/resume")
    _run(client, full, other)
    node = _node(client, "full")
    assert (node["state"], node["drain_reason"]) == ("drained", f"job {moved} could not start here: {said}")
    assert job(client, kept_here)["state"] == "failed"
    _run(client, full, other)
    again = job(client, moved)
    assert again["state"] == "running" and [a["node"] for a in again["allocation"]] == ["other"], again
    with ctx.db.read() as s:
        told = list(s.scalars(select(EventRow.message).where(EventRow.job_id == moved, EventRow.kind == "requeued")))
    assert told == [f"requeued (its node could not start it: {said}); waiting to run again"], told


def test_a_node_is_removed_only_once_its_jobs_ended_and_its_agent_is_refused_then(
    client: AsgiClient, agent: FakeAgent
) -> None:
    running = submit(client, gpus=1)["id"]
    _run(client, agent)
    r = _admin(client, "DELETE", "gpu-01")
    assert r.status_code == 409 and f"still runs job(s) {running}" in r.json()["detail"]
    agent.exit(running)
    _run(client, agent)
    assert _admin(client, "DELETE", "gpu-01").status_code == 204
    assert [n["name"] for n in client.get("/api/v1/nodes", headers=auth(ALICE)).json()] == []
    beat = client.post("/api/v1/agent/heartbeat", content=agent.heartbeat().model_dump_json(),
                       headers={"Authorization": f"Bearer {agent.token}", "Content-Type": "application/json"})
    assert beat.status_code == 401
    assert _admin(client, "DELETE", "gpu-01").status_code == 404


def test_labels_models_and_memory_steer_jobs_and_reasons_name_what_is_missing(
    client: AsgiClient, ctx: ServerContext
) -> None:
    a100, h100 = _agent(client, ctx, "a-01", model="A100"), _agent(client, ctx, "h-01", model="H100")
    r = _admin(client, "PATCH", "h-01", {"labels": ["net=ib", "rack=r2"]})
    assert r.status_code == 200 and r.json()["labels"] == {"net": "ib", "rack": "r2"}
    ib = submit(client, gpus=1, constraints=["net=ib"])["id"]
    either = submit(client, gpus=2, gpu_model="V100,A100")["id"]
    _run(client, a100, h100)
    assert job(client, ib)["allocation"][0]["node"] == "h-01"  # type: ignore[index]
    assert job(client, either)["allocation"][0]["node"] == "a-01"  # type: ignore[index]

    refused = client.post("/api/v1/jobs", json={"command": ["x"], "gpus": 1, "constraints": ["net=roce"]},
                          headers=auth(ALICE))
    assert refused.status_code == 400
    assert refused.json()["detail"] == "this job can never run: needs node label net=roce; no node has it"
    too_big = client.post("/api/v1/jobs", json={"command": ["x"], "gpus": 1, "gpu_memory_mb": 100 * 1024},
                          headers=auth(ALICE))
    assert too_big.status_code == 400 and "at least 102400 MiB" in too_big.json()["detail"]
    bad = client.post("/api/v1/jobs", json={"command": ["x"], "constraints": ["no label"]}, headers=auth(ALICE))
    assert bad.status_code == 422

    # The label goes while a job that needs it waits: its reason names it.
    waiting = submit(client, gpus=1, constraints=["rack=r2"])["id"]
    assert _admin(client, "PATCH", "h-01", {"labels": ["rack="]}).status_code == 200
    _run(client, a100, h100)
    assert job(client, waiting)["reason"] == "needs node label rack=r2; no node has it"

    # An admin's name for the GPU model is what jobs ask for.
    assert _admin(client, "PATCH", "a-01", {"gpu_model": "A100-80G"}).json()["gpus"][0]["model"] == "A100-80G"
    named = submit(client, gpus=0, gpu_model="A100-80G")["id"]
    _run(client, a100, h100)
    assert job(client, named)["state"] == "running"


def test_a_labs_own_node_is_lent_while_idle_and_taken_back(client: AsgiClient, ctx: ServerContext) -> None:
    shared, owned = _agent(client, ctx, "shared-01", gpus=1), _agent(client, ctx, "vision-01", gpus=2)
    r = _admin(client, "PATCH", "vision-01", {"owner": "vision"})
    assert r.status_code == 200 and r.json()["owner"] == "vision"
    assert _admin(client, "PATCH", "vision-01", {"owner": "nosuchlab"}).status_code == 404
    borrower = submit(client, BOB, gpus=2, lab="nlp")["id"]  # nlp owns nothing: it borrows vision's idle node
    _run(client, shared, owned)
    got = job(client, borrower)
    assert got["state"] == "running" and got["borrowing"] and got["allocation"][0]["node"] == "vision-01", got  # type: ignore[index]

    mine = submit(client, ALICE, gpus=2)["id"]  # vision wants its node back
    _run(client, shared, owned)
    _run(client, shared, owned)  # the borrower's agent stopped it
    assert job(client, borrower)["state"] == "pending"
    _run(client, shared, owned)
    got = job(client, mine)
    assert got["state"] == "running" and not got["borrowing"] and got["allocation"][0]["node"] == "vision-01", got  # type: ignore[index]


def _beat_with(agent: FakeAgent, problems: list[GpuProblem]) -> None:
    body = agent.heartbeat().model_copy(update={"gpu_problems": problems})
    r = agent.client.post("/api/v1/agent/heartbeat", content=body.model_dump_json(),
                          headers={"Authorization": f"Bearer {agent.token}", "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    agent.apply(HeartbeatReply.model_validate(r.json()))


def test_a_gpu_with_a_health_problem_leaves_service_with_the_evidence_until_resumed(
    client: AsgiClient, agent: FakeAgent
) -> None:
    on_gpu0 = submit(client, gpus=1)["id"]
    _run(client, agent)
    assert agent.held_gpus() == {on_gpu0: [0]}
    _beat_with(agent, [GpuProblem(index=0, problem="Xid 79 (fallen off the bus)"),
                       GpuProblem(index=2, problem="3 uncorrectable ECC errors")])
    node = _node(client, "gpu-01")
    assert [g["health"] for g in node["gpus"]] == ["Xid 79 (fallen off the bus)", None,
                                                   "3 uncorrectable ECC errors", None]
    assert "out of service: Xid 79 (fallen off the bus)" in get(client, "/nodes", login(client, ADMIN)).text
    assert job(client, on_gpu0)["state"] == "running"  # its job runs on
    grid = get(client, "/ui/cluster.json", login(client, ADMIN)).json()
    assert [t["cls"].split()[1] for t in grid["nodes"][0]["tiles"]] == ["busy", "free", "drained", "free"]
    assert (grid["totals"]["free"], grid["totals"]["drained"]) == (2, 1)  # GPU 2 is not free: nothing starts there
    wide = submit(client, gpus=3)["id"]
    two = [submit(client, gpus=1)["id"] for _ in range(2)]
    _run(client, agent)
    assert job(client, wide)["state"] == "pending"
    assert sorted(g for j in two for g in agent.held_gpus()[j]) == [1, 3]  # never 0 or 2

    r = _admin(client, "POST", "gpu-01/resume")
    assert r.status_code == 200 and all(g["health"] is None for g in r.json()["gpus"])
    for j in [on_gpu0, *two]:
        agent.exit(j)
    _run(client, agent)
    _run(client, agent)
    assert job(client, wide)["state"] == "running"


def test_a_nodes_history_keeps_its_drains_health_problems_resumes_and_removal_with_their_reasons(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    assert _admin(client, "POST", "gpu-01/drain", {"reason": "new fans"}).status_code == 200
    _beat_with(agent, [GpuProblem(index=1, problem="Xid 79 (fallen off the bus)")])
    r = _admin(client, "POST", "gpu-01/resume", {"reason": "fans fitted, GPU reseated"})
    assert r.status_code == 200 and r.json()["state"] == "up", r.text

    shown = client.get("/api/v1/nodes/gpu-01", headers=auth(ALICE))  # anyone may read it, as `nanum nodes`
    assert shown.status_code == 200, shown.text
    detail = shown.json()
    assert detail["state"] == "up" and [g["index"] for g in detail["gpus"]] == [0, 1, 2, 3]
    assert [(h["actor"], h["action"]) for h in detail["history"]] == [
        ("admin", "drain"), ("nanum", "health"), ("admin", "resume")]
    assert [h["message"] for h in detail["history"]] == [
        "admin drained node gpu-01: new fans",
        "GPU 1 of node gpu-01 taken out of service: Xid 79 (fallen off the bus)",
        "admin resumed node gpu-01: fans fitted, GPU reseated",
    ]
    # the evidence outlives the resume that cleared it from the node
    assert detail["history"][2]["changes"]["gpu_health"][0]["1"]["problem"] == "Xid 79 (fallen off the bus)"

    assert _admin(client, "DELETE", "gpu-01?reason=" + "x" * 501).status_code == 422
    assert _admin(client, "DELETE", "gpu-01?reason=sent%00back").status_code == 422
    assert _admin(client, "DELETE", "gpu-01?reason=returned+to+the+vendor").status_code == 204
    gone = client.get("/api/v1/nodes/gpu-01", headers=auth(ALICE))
    assert gone.status_code == 404 and "no node named gpu-01" in gone.json()["detail"]
    _agent(client, ctx, "gpu-01")  # the name used again: its history goes on
    history = client.get("/api/v1/nodes/gpu-01", headers=auth(ALICE)).json()["history"]
    assert "admin removed node gpu-01: returned to the vendor" in [h["message"] for h in history]


def test_the_nodes_page_shows_each_nodes_latest_changes(client: AsgiClient, ctx: ServerContext,
                                                        agent: FakeAgent) -> None:
    _agent(client, ctx, "gpu-02")
    for i in range(4):
        assert _admin(client, "POST", "gpu-01/drain", {"reason": f"drain {i}"}).status_code == 200
        assert _admin(client, "POST", "gpu-01/resume", {"reason": f"resume {i}"}).status_code == 200
    page = get(client, "/nodes", login(client, ALICE)).text
    mine = page[page.index('id="gpu-01"'):page.index('id="gpu-02"')]
    assert "Latest changes" in mine and "nanum node show gpu-01" in mine
    shown = [f"admin drained node gpu-01: drain {i}" in mine for i in range(4)]
    assert shown == [False, False, True, True]  # the newest five: drain 2, resume 2, drain 3, resume 3, and resume 1
    assert "admin resumed node gpu-01: resume 1" in mine and "resume 0" not in mine
    assert mine.index("drain 2") < mine.index("resume 3")  # oldest first
    assert "Latest changes" not in page[page.index('id="gpu-02"'):]  # a node without changes shows none
