"""The jobs API as a user meets it: submit, list, show, cancel; auth; refusals that name the field or limit."""

from __future__ import annotations

import threading
import time
from datetime import datetime

from sqlalchemy import select

from nanum.core import HistoryPredictor
from nanum.server import snapshot
from nanum.server.context import ServerContext
from nanum.store import JobRow
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent


def test_submit_returns_the_pending_job_with_every_field(client: AsgiClient) -> None:
    got = submit(
        client,
        command=["python", "train.py", "--lr", "3e-4"],
        gpus=2,
        time_limit_s=3600,
        env={"SEED": "1"},
        workdir="/home/alice/proj",
    )
    assert got["state"] == "pending"
    assert got["user"] == "alice" and got["lab"] == "vision"
    assert got["name"] == "python" and got["gpus"] == 2 and got["nodes"] == 1
    assert got["command"] == ["python", "train.py", "--lr", "3e-4"]
    assert got["env"] == {"SEED": "1"} and got["workdir"] == "/home/alice/proj"
    assert got["allocation"] == [] and got["runs"] == 0 and got["exit_code"] is None
    assert str(got["submit_time"]).endswith("Z") and got["start_time"] is None
    shown = job(client, got["id"])
    assert {k: shown[k] for k in got} == got


def test_list_shows_active_jobs_of_everyone_and_all_on_request(client: AsgiClient) -> None:
    a = submit(client, ALICE, name="a")
    b = submit(client, BOB, name="b")
    c = submit(client, BOB, name="c")
    assert client.post(f"/api/v1/jobs/{c['id']}/cancel", headers=auth(BOB)).status_code == 200
    listed = client.get("/api/v1/jobs", headers=auth(ALICE)).json()
    assert [j["id"] for j in listed] == [a["id"], b["id"]]
    everything = client.get("/api/v1/jobs", params={"all": "true"}, headers=auth(ALICE)).json()
    assert [j["id"] for j in everything] == [a["id"], b["id"], c["id"]]
    mine = client.get("/api/v1/jobs", params={"user": "bob", "all": "true"}, headers=auth(ALICE)).json()
    assert [j["name"] for j in mine] == ["b", "c"]
    cancelled = client.get("/api/v1/jobs", params={"state": ["cancelled"]}, headers=auth(ALICE)).json()
    assert [j["id"] for j in cancelled] == [c["id"]]
    bad = client.get("/api/v1/jobs", params={"state": "sleeping"}, headers=auth(ALICE))
    assert bad.status_code == 400 and "sleeping" in bad.json()["detail"]


def test_a_listing_gives_every_active_job_and_the_latest_finished_ones(client: AsgiClient) -> None:
    """Finished jobs pile up for years: a listing gives the latest `limit` of them (1,000 unless asked), and every
    active job however old."""
    old = submit(client, name="old")  # still waiting, submitted before every finished job
    ended = [submit(client)["id"] for _ in range(5)]
    for job_id in ended:
        assert client.post(f"/api/v1/jobs/{job_id}/cancel", headers=auth(ALICE)).status_code == 200
    new = submit(client, name="new")

    def listed(**params: object) -> list[object]:
        r = client.get("/api/v1/jobs", params=params, headers=auth(BOB))
        assert r.status_code == 200, r.text
        return [j["id"] for j in r.json()]

    assert listed(all="true", limit=2) == [old["id"], *ended[-2:], new["id"]]
    assert listed(all="true") == [old["id"], *ended, new["id"]]
    assert listed(state=["cancelled", "pending"], limit=1) == [old["id"], ended[-1], new["id"]]
    r = client.get("/api/v1/jobs", params={"all": "true", "limit": 100_001}, headers=auth(BOB))
    assert r.status_code == 422 and "limit" in r.json()["detail"], r.text


def test_a_listing_shows_each_job_once_while_jobs_end_and_are_queued_again(client: AsgiClient) -> None:
    """Active and finished jobs are read apart (every active one, the latest finished ones), as of one moment: a
    job that ends or is queued again meanwhile is listed once, never twice or not at all."""
    ids = [submit(client)["id"] for _ in range(20)]
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            for job_id in ids:
                client.post(f"/api/v1/jobs/{job_id}/cancel", headers=auth(ALICE))
                client.post(f"/api/v1/jobs/{job_id}/requeue", headers=auth(ALICE))

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    try:
        for _ in range(60):
            listed = [j["id"] for j in client.get("/api/v1/jobs", params={"all": "true"}, headers=auth(BOB)).json()]
            assert listed == ids
    finally:
        stop.set()
        worker.join(10)


def test_cancel_pending_is_immediate_and_a_second_cancel_conflicts(client: AsgiClient) -> None:
    j = submit(client)
    r = client.post(f"/api/v1/jobs/{j['id']}/cancel", headers=auth(ALICE))
    assert r.status_code == 200 and r.json()["state"] == "cancelled" and r.json()["end_time"]
    again = client.post(f"/api/v1/jobs/{j['id']}/cancel", headers=auth(ALICE))
    assert again.status_code == 409 and "already ended" in again.json()["detail"]


def test_only_the_owner_or_an_admin_may_cancel_or_read_logs(client: AsgiClient) -> None:
    j = submit(client, ALICE)
    for path in (f"/api/v1/jobs/{j['id']}/logs",):
        r = client.get(path, headers=auth(BOB))
        assert r.status_code == 403 and "belongs to another user" in r.json()["detail"]
    r = client.post(f"/api/v1/jobs/{j['id']}/cancel", headers=auth(BOB))
    assert r.status_code == 403
    assert job(client, j["id"])["state"] == "pending"
    assert client.get(f"/api/v1/jobs/{j['id']}/logs", headers=auth(ADMIN)).status_code == 200
    assert client.post(f"/api/v1/jobs/{j['id']}/cancel", headers=auth(ADMIN)).json()["state"] == "cancelled"


def test_everyone_may_see_every_job(client: AsgiClient) -> None:
    j = submit(client, ALICE)
    assert client.get(f"/api/v1/jobs/{j['id']}", headers=auth(BOB)).json()["user"] == "alice"


def test_no_token_or_an_unknown_token_is_401_with_a_hint(client: AsgiClient) -> None:
    r = client.get("/api/v1/jobs")
    assert r.status_code == 401 and "nanum login" in r.json()["detail"]
    r = client.get("/api/v1/jobs", headers=auth("nope"))
    assert r.status_code == 401 and "unknown API token" in r.json()["detail"]
    assert client.get("/api/v1/health").json()["status"] == "ok"


def test_a_node_token_is_not_a_user_token(client: AsgiClient, agent: FakeAgent) -> None:
    assert client.get("/api/v1/jobs", headers=auth(agent.token)).status_code == 401
    hb = agent.heartbeat().model_dump_json()
    r = client.post("/api/v1/agent/heartbeat", content=hb, headers=auth(ALICE))
    assert r.status_code == 401 and "node token" in r.json()["detail"]


def test_invalid_fields_are_422_naming_the_field(client: AsgiClient) -> None:
    cases = {
        "gpus": {"command": ["x"], "gpus": -1},
        "priority": {"command": ["x"], "priority": 101},
        "command": {"command": []},
        "nodes": {"command": ["x"], "nodes": 0},
    }
    for field, body in cases.items():
        r = client.post("/api/v1/jobs", json=body, headers=auth(ALICE))
        assert r.status_code == 422, r.text
        assert r.json()["detail"].startswith(f"invalid {field}: "), r.json()
    r = client.post("/api/v1/jobs", content=b"{not json", headers={**auth(ALICE), "Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"] == "the request body is not valid JSON"


def test_impossible_requests_are_refused_naming_the_limit(client: AsgiClient, agent: FakeAgent) -> None:
    r = client.post("/api/v1/jobs", json={"command": ["x"], "gpus": 16}, headers=auth(ALICE))
    assert r.status_code == 400
    assert r.json()["detail"] == "this job can never run: needs 16 GPUs on one node; the largest node has 4 (gpu-01)"
    r = client.post("/api/v1/jobs", json={"command": ["x"], "gpu_model": "H100"}, headers=auth(ALICE))
    assert r.status_code == 400 and "H100" in r.json()["detail"] and "A100" in r.json()["detail"]
    r = client.post("/api/v1/jobs", json={"command": ["x"], "gpus": 1, "nodes": 2}, headers=auth(ALICE))
    assert r.status_code == 400 and "2 nodes" in r.json()["detail"]
    client.patch("/api/v1/labs/vision", json={"max_gpus": 2}, headers=auth(ADMIN))
    r = client.post("/api/v1/jobs", json={"command": ["x"], "gpus": 3}, headers=auth(ALICE))
    assert r.status_code == 400 and "max_gpus 2" in r.json()["detail"]


def test_before_any_node_reports_every_request_is_accepted(client: AsgiClient) -> None:
    assert submit(client, gpus=64)["state"] == "pending"


def test_labs_choose_where_a_job_is_charged(client: AsgiClient) -> None:
    assert submit(client, BOB)["lab"] == "vision"  # bob's first lab is his default
    assert submit(client, BOB, lab="nlp")["lab"] == "nlp"
    r = client.post("/api/v1/jobs", json={"command": ["x"], "lab": "nlp"}, headers=auth(ALICE))
    assert r.status_code == 403 and "not a member of lab nlp" in r.json()["detail"]
    r = client.post("/api/v1/jobs", json={"command": ["x"], "lab": "physics"}, headers=auth(ALICE))
    assert r.status_code == 404 and r.json()["detail"] == "no lab named physics"
    assert submit(client, ADMIN, lab="nlp")["lab"] == "nlp"  # admins may use any lab


def test_a_pending_job_explains_why_it_waits(client: AsgiClient, agent: FakeAgent) -> None:
    first = submit(client, gpus=4, time_limit_s=3600)
    second = submit(client, gpus=2)
    tick(client)
    assert job(client, first["id"])["state"] == "running"
    waiting = job(client, second["id"])
    assert waiting["state"] == "pending"
    assert waiting["reason_code"] == "reserved"
    assert waiting["reason"] == f"next in line; reserved to start when job {first['id']} ends"
    started = datetime.fromisoformat(str(job(client, first["id"])["start_time"]))
    expected = datetime.fromisoformat(str(waiting["estimated_start"]))
    assert abs((expected - started).total_seconds() - 3600) < 1  # when the hour's limit is up


def test_an_unknown_job_is_404(client: AsgiClient) -> None:
    r = client.get("/api/v1/jobs/999", headers=auth(ALICE))
    assert r.status_code == 404 and r.json()["detail"] == "no job 999"


def test_jobs_submitted_together_with_one_request_form_a_burst(client: AsgiClient, ctx: ServerContext) -> None:
    # A sweep: three jobs of one request in a row, then one with another name and one of another user.
    sweep = [submit(client, command=["python", "train.py", "--seed", str(i)])["id"] for i in range(3)]
    other_name = submit(client, command=["python", "eval.py"], name="eval")["id"]
    other_user = submit(client, token=BOB, command=["python", "train.py"], lab="vision")["id"]
    with ctx.db.read() as s:
        burst = {row.id: row.burst for row in s.execute(select(JobRow.id, JobRow.burst))}
    assert [burst[i] for i in sweep] == [None, sweep[0], sweep[0]]
    assert burst[other_name] is None and burst[other_user] is None
    assert [job(client, i)["burst"] for i in sweep] == [None, sweep[0], sweep[0]]  # and the API says so
    # A GPU model is part of the request: A100 jobs form their own burst, which a job of any model does not join.
    a100 = [submit(client, command=["python", "train.py"], gpu_model="A100")["id"] for _ in range(2)]
    anything = submit(client, command=["python", "train.py"])["id"]
    assert [job(client, i)["burst"] for i in [*a100, anything]] == [None, a100[0], sweep[0]]
    # The scheduler sees them as one burst.
    with ctx.db.read() as s:
        plan = snapshot.build(s, time.time(), ctx.settings.node_timeout_s, HistoryPredictor())
    seen = {j.id: j.burst for j in plan.snapshot.pending}
    assert [seen[i] for i in sweep] == [None, sweep[0], sweep[0]]
