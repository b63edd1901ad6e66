"""Monitoring through the real API: readings stored and rolled up, GPUs used outside nanum kept out of
scheduling, idle jobs flagged, notified and released with evidence, efficiency summaries, /metrics."""

from __future__ import annotations

import dataclasses
import json
import re
import socketserver
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from nanum.protocol import GpuProcess
from nanum.server.app import create_app
from nanum.server.context import ServerContext
from nanum.server.services import accounts, history
from nanum.store import EventRow, GpuSampleRow
from tests.server.asgiclient import AsgiClient, serve
from tests.server.conftest import ADMIN, ALICE, BOB, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent
from tests.server.monitoredagent import MonitoredAgent
from tests.server.test_web import get, login


@pytest.fixture
def node(client: AsgiClient, ctx: ServerContext) -> MonitoredAgent:
    agent = MonitoredAgent(client, "gpu-01", accounts.add_node(ctx, "gpu-01"), gpus=4)
    agent.beat()
    return agent


def run_job(client: AsgiClient, node: MonitoredAgent, **body: Any) -> int:
    job_id = int(submit(client, **body)["id"])  # type: ignore[call-overload]
    tick(client)
    node.beat()
    assert job_id in node.running
    return job_id


def events(ctx: ServerContext, job_id: int) -> list[tuple[str, str]]:
    with ctx.db.read() as s:
        return [
            (e.kind, e.message)
            for e in s.scalars(select(EventRow).where(EventRow.job_id == job_id).order_by(EventRow.id))
        ]


def patch(client: AsgiClient, path: str, body: dict[str, Any], token: str = ADMIN) -> Any:
    r = client.patch(f"/api/v1{path}", json=body, headers=auth(token))
    assert r.status_code == 200, r.text
    return r.json()


# -- readings --------------------------------------------------------------------------------------------------


def test_readings_become_a_jobs_utilisation_and_timeline(client: AsgiClient, node: MonitoredAgent) -> None:
    job_id = run_job(client, node, gpus=2)
    now = time.time()
    for i, u in enumerate((40.0, 60.0, 80.0)):
        node.read(now - 20 + 10 * i, util=u)
    sent = list(node.samples)
    node.beat()
    node.samples = sent  # a resent heartbeat (its reply was lost) counts once
    node.beat()
    shown = job(client, job_id)
    assert shown["gpu_util"] == 80.0 and shown["gpu_util_avg"] == 60.0
    usage = client.get(f"/api/v1/jobs/{job_id}/usage", headers=auth(ALICE)).json()
    assert [p[1] for p in usage["timeline"]] == [40.0, 60.0, 80.0]
    assert usage["gpu_memory_peak_mb"] == 30000 and usage["gpu_memory_mb"] == 81920


def test_readings_of_many_nodes_are_written_together_and_a_removed_nodes_are_dropped(
    client: AsgiClient, node: MonitoredAgent, ctx: ServerContext
) -> None:
    """The server writes the readings heartbeats bring about once a second, every node's in one go: a node removed
    while its readings wait must not cost the others theirs."""
    other = MonitoredAgent(client, "gpu-02", accounts.add_node(ctx, "gpu-02"), gpus=4)
    gone = MonitoredAgent(client, "gpu-03", accounts.add_node(ctx, "gpu-03"), gpus=4)
    for agent in (other, gone):
        FakeAgent.beat(agent)
    first, second = run_job(client, node, gpus=4), run_job(client, node, gpus=0, cpus=1)
    mine = int(submit(client, gpus=4)["id"])  # type: ignore[call-overload]
    tick(client)
    FakeAgent.beat(other)
    FakeAgent.beat(other)
    assert job(client, mine)["state"] == "running" and job(client, first)["state"] == "running"
    for agent, util in ((node, 40.0), (other, 70.0), (gone, 0.0)):
        agent.read(util=util)
        FakeAgent.beat(agent)  # sent, not yet written
    assert "gpu_util" not in job(client, first) and "gpu_util" not in job(client, mine)
    r = client.request("DELETE", "/api/v1/nodes/gpu-03", headers=auth(ADMIN))
    assert r.status_code == 204, r.text
    assert client.app.state.monitoring.flush() == 3
    assert job(client, first)["gpu_util"] == 40.0 and job(client, mine)["gpu_util"] == 70.0
    assert "gpu_util" not in job(client, second)  # it holds no GPU
    with ctx.db.read() as s:
        nodes = set(s.scalars(select(GpuSampleRow.node_id).distinct()))
    assert len(nodes) == 2


def test_readings_the_database_refuses_cost_no_other_node_its_own(
    client: AsgiClient, node: MonitoredAgent, ctx: ServerContext, caplog: pytest.LogCaptureFixture
) -> None:
    """A forged or broken agent reports 2 TiB in use on each of 4 GPUs: its job's memory (their sum) is more than
    PostgreSQL's integer holds, and the whole batch is refused. The other nodes' readings are still written, the
    bad node's are dropped with a warning, and nothing is left to fail again."""
    other = MonitoredAgent(client, "gpu-02", accounts.add_node(ctx, "gpu-02"), gpus=4)
    FakeAgent.beat(other)
    bad = run_job(client, node, gpus=4)
    good = int(submit(client, gpus=4)["id"])  # type: ignore[call-overload]
    tick(client)
    FakeAgent.beat(other)
    FakeAgent.beat(other)
    node.read(util=10.0, memory_mb=2**31 - 1)
    other.read(util=70.0)
    FakeAgent.beat(node)
    FakeAgent.beat(other)
    assert client.app.state.monitoring.flush() == 2
    assert job(client, good)["gpu_util"] == 70.0
    if ctx.db.is_postgres:
        assert "gpu_util" not in job(client, bad)
        assert "dropped 1 GPU readings of node id" in caplog.text
    assert client.app.state.monitoring.flush() == 0  # nothing waits


def test_a_server_that_stops_writes_the_readings_it_was_sent(ctx: ServerContext) -> None:
    app = create_app(ctx, run_scheduler=False)
    with serve(app) as client:
        node = MonitoredAgent(client, "gpu-01", accounts.add_node(ctx, "gpu-01"), gpus=4)
        FakeAgent.beat(node)
        job_id = run_job(client, node, gpus=1)
        node.read(util=55.0)
        FakeAgent.beat(node)  # the writer runs only every second: the server stops first
    app.state.scheduler.leadership.release()
    with ctx.db.read() as s:
        utils = list(s.scalars(select(GpuSampleRow.util).where(GpuSampleRow.job_id == job_id)))
    assert utils == [55.0]


def test_a_gpu_used_outside_nanum_is_not_handed_out(client: AsgiClient, node: MonitoredAgent) -> None:
    node.strangers = {1: 4242}
    node.read()
    node.beat()
    whole = submit(client, gpus=4)
    singles = [submit(client, gpus=1) for _ in range(3)]
    tick(client)
    node.beat()
    assert job(client, whole["id"])["state"] == "pending"
    held = sorted(g for j in singles for g in job(client, j["id"])["allocation"][0]["gpus"])
    assert held == [0, 2, 3]
    [shown] = client.get("/api/v1/nodes", headers=auth(ALICE)).json()
    assert shown["gpus"][1]["outside"] == [
        {"pid": 4242, "user": "mallory", "command": "python hog.py", "memory_mb": 2048}
    ]
    assert shown["gpus"][0]["outside"] == [] and shown["gpus"][0]["util"] == 0.0
    node.strangers = {}  # the stranger's process ended
    node.read()
    node.beat()
    last = submit(client, gpus=1)
    tick(client)
    assert job(client, last["id"])["allocation"][0]["gpus"] == [1]


def test_a_reading_from_before_a_job_ended_does_not_keep_its_gpus_from_the_next(
    client: AsgiClient, node: MonitoredAgent
) -> None:
    """Readings are written a moment after they are taken: by then the job the reading saw may have ended and its
    GPUs gone to the next job. Its processes in that reading are not someone outside nanum."""
    first = run_job(client, node, gpus=4)
    node.read()  # the job's processes on all four GPUs
    taken = node.samples[:]
    node.samples = []
    node.exit(first)
    node.beat()  # the end: the GPUs are free
    node.samples = taken
    FakeAgent.beat(node)  # the reading taken before the end arrives after it ...
    client.app.state.monitoring.flush()  # ... and is written
    [shown] = client.get("/api/v1/nodes", headers=auth(ALICE)).json()
    assert [g["outside"] for g in shown["gpus"]] == [[], [], [], []]
    second = submit(client, gpus=4)
    tick(client)
    assert job(client, second["id"])["state"] == "running"


def test_a_job_using_a_gpu_it_was_not_given_is_shown_outside_nanum(client: AsgiClient, node: MonitoredAgent) -> None:
    escaped = run_job(client, node, gpus=1)
    [held] = job(client, escaped)["allocation"][0]["gpus"]
    other = next(i for i in range(4) if i != held)
    reading = node.read()
    reading.gpus[other].processes.append(GpuProcess(pid=4343, memory_mb=1024, job_id=escaped))
    node.beat()
    [shown] = client.get("/api/v1/nodes", headers=auth(ALICE)).json()
    assert [p["pid"] for p in shown["gpus"][other]["outside"]] == [4343]
    whole = submit(client, gpus=3)  # the three GPUs the job was not given: one of them is taken
    tick(client)
    assert job(client, whole["id"])["state"] == "pending"


def test_history_is_rolled_up_and_pruned(client: AsgiClient, node: MonitoredAgent, ctx: ServerContext) -> None:
    run_job(client, node, gpus=1)
    start = (time.time() // 3600 - 2) * 3600  # two hours ago, on the hour
    for k in range(12):  # readings every 10 s for two minutes
        node.read(start + 10 * k, util=10.0 * (k % 2) + 50.0)
    node.beat()
    mon = client.app.state.monitoring
    done = history.maintain(ctx, start + 3 * 3600, history.Retention(raw_s=60))
    assert done["rolled_60"] == 2 * 4 and done["rolled_3600"] == 4  # per GPU (and job), per bucket
    with ctx.db.read() as s:
        rows = s.execute(
            select(GpuSampleRow.res, func.count(), func.sum(GpuSampleRow.n)).group_by(GpuSampleRow.res)
        ).all()
        minute = (
            s.execute(select(GpuSampleRow.util).where(GpuSampleRow.res == 60, GpuSampleRow.job_id != 0)).scalars().all()
        )
    assert {r[0]: r[1] for r in rows} == {60: 8, 3600: 4}  # raw readings older than a minute are gone
    assert minute == [55.0, 55.0]
    assert mon.maintain(start + 3 * 3600)["rolled_60"] == 0  # nothing new to roll up


# -- idle jobs -------------------------------------------------------------------------------------------------


class Inbox:
    """A real webhook receiver on a local port."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        inbox = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                inbox.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def inbox(ctx: ServerContext) -> Iterator[Inbox]:
    """The receiver, on loopback: the server is told to allow that host (`--webhook-allow-host 127.0.0.1`)."""
    ctx.settings = dataclasses.replace(ctx.settings, webhook_allow_hosts=frozenset({"127.0.0.1"}))
    box = Inbox()
    yield box
    box.httpd.shutdown()
    box.httpd.server_close()


def readings(node: MonitoredAgent, start: float, end: float, step: float = 30.0, **kw: Any) -> None:
    """Readings every `step` seconds from `start` to `end` (GPUs idle unless `util` says otherwise), sent."""
    kw.setdefault("util", 0.0)
    t = start
    while t <= end:
        node.read(t, cpu=0.5, **kw)
        t += step
    node.beat()


def idle_for(node: MonitoredAgent, seconds: float) -> None:
    now = time.time()
    readings(node, now - seconds, now)


def test_an_idle_job_is_flagged_with_evidence_and_its_owner_told(
    client: AsgiClient, node: MonitoredAgent, ctx: ServerContext, inbox: Inbox
) -> None:
    patch(client, "/monitoring/idle", {"batch_flag_s": 600})
    patch(client, "/monitoring/notify", {"webhook_url": inbox.url, "public_url": "http://dash.example"})
    r = client.request(
        "PUT", "/api/v1/users/alice/contact", json={"webhook": inbox.url + "/alice"}, headers=auth(ALICE)
    )
    assert r.status_code == 200, r.text
    busy, lazy = run_job(client, node, gpus=1), run_job(client, node, gpus=1)
    working = {g: 95.0 for g in node.running[busy].gpus}
    now = time.time()
    readings(node, now - 1000, now - 700, util=working)  # 5 minutes idle: not yet
    assert "idle" not in job(client, lazy)
    readings(node, now - 690, now, util=working)
    shown = job(client, lazy)
    assert shown["idle"]["stage"] == "flagged" and shown["idle"]["for_s"] >= 990
    assert "idle" not in job(client, busy)
    [(kind, evidence)] = [e for e in events(ctx, lazy) if e[0].startswith("idle")]
    assert kind == "idle-flagged" and "GPU utilisation at most 5% (now 0%)" in evidence and "CPU 0%" in evidence
    assert client.app.state.monitoring.notifier.flush()
    assert sorted(m["url"] for m in inbox.received) == [f"http://dash.example/jobs/{lazy}"] * 2
    assert inbox.received[0]["event"] == "idle-flagged" and "looks idle" in inbox.received[0]["text"]
    node.read(util=80.0)
    node.beat()
    assert events(ctx, lazy)[-1][0] == "idle-cleared" and job(client, lazy).get("idle") is None


def test_an_array_task_is_named_as_ps_names_it_wherever_its_gpus_are_shown(
    client: AsgiClient, node: MonitoredAgent, inbox: Inbox
) -> None:
    """Task 1 of array 7 is `7_1` in `nanum ps`, `nanum cancel` and the reasons; the GPU views and the idle notice
    say the same, not the task's internal job id."""
    patch(client, "/monitoring/idle", {"batch_flag_s": 600})
    patch(client, "/monitoring/notify", {"webhook_url": inbox.url})
    array = int(submit(client, gpus=2, array="0-1")["id"])  # type: ignore[call-overload]
    tick(client)
    node.beat()
    tasks = {t["array_task"]: t for t in client.get(f"/api/v1/jobs?array={array}", headers=auth(ALICE)).json()}
    task, ref = tasks[1], f"{array}_1"
    assert task["id"] != array and task["state"] == "running"
    [shown] = client.get("/api/v1/nodes", headers=auth(ALICE)).json()
    held = {g["job_ref"] for g in shown["gpus"] if g["job_id"] == task["id"]}
    assert held == {ref}
    cookies = login(client, ALICE)
    grid = get(client, "/ui/cluster.json", cookies).json()
    whos = {t["who"] for t in grid["nodes"][0]["tiles"] if t["href"] == f"/jobs/{task['id']}"}
    assert whos == {f"#{ref} alice"}
    assert f">#{ref} python<" in get(client, "/nodes", cookies).text
    idle_for(node, 700)
    assert client.app.state.monitoring.notifier.flush()
    about = {m["job"]["ref"]: m for m in inbox.received}
    assert about[ref]["job"]["id"] == task["id"] and about[ref]["text"].startswith(f"nanum: job {ref} (python)")


def test_past_the_second_window_an_idle_job_is_released(
    client: AsgiClient, node: MonitoredAgent, ctx: ServerContext
) -> None:
    patch(client, "/labs/vision/idle", {"batch_flag_s": 600, "batch_release_s": 1200})
    assert client.get("/api/v1/monitoring/idle", headers=auth(ALICE)).json()["policy"]["batch_release_s"] is None
    job_id = run_job(client, node, gpus=1)
    idle_for(node, 1300)
    assert [k for k, _ in events(ctx, job_id) if k.startswith("idle")] == ["idle-flagged", "idle-released"]
    node.beat()  # the agent stops it (SIGTERM with the preempt file: a chance to checkpoint) ...
    node.beat()  # ... and reports it gone
    ended = job(client, job_id)
    assert ended["state"] == "cancelled" and ended["reason"] == "released after being idle (idle for 20m)"


def test_a_notebook_at_work_is_not_idle(client: AsgiClient, node: MonitoredAgent, ctx: ServerContext) -> None:
    patch(client, "/monitoring/idle", {"notebook_flag_s": 600})
    job_id = run_job(client, node, gpus=1, kind="notebook")
    now = time.time()
    for k in range(30):  # 15 minutes at 0 % GPU, but someone runs a cell every few minutes
        node.read(now - 900 + 30 * k, util=0.0, cpu=0.0, activity=now - 900 + 30 * (k - k % 8))
    node.beat()
    assert not [k for k, _ in events(ctx, job_id) if k.startswith("idle")]


def test_bad_idle_settings_are_refused_in_one_line(client: AsgiClient) -> None:
    r = client.patch("/api/v1/monitoring/idle", json={"batch_flag_s": -5}, headers=auth(ADMIN))
    assert r.status_code == 400 and r.json() == {"detail": "idle setting batch_flag_s must be a number ≥ 0 or null"}
    assert client.patch("/api/v1/monitoring/idle", json={}, headers=auth(ALICE)).status_code == 403
    r = client.patch("/api/v1/monitoring/notify", json={"smtp_password": "pw"}, headers=auth(ADMIN))
    assert r.json()["smtp_password"] == "set"


# -- efficiency ------------------------------------------------------------------------------------------------


def test_a_finished_job_keeps_its_efficiency_summary(client: AsgiClient, node: MonitoredAgent) -> None:
    job_id = run_job(client, node, gpus=1, cpus=2)
    now = time.time()
    for k in range(10):
        node.read(now - 100 + 10 * k, util=20.0, memory_mb=8000, cpu=190.0)
    node.beat()
    node.exit(job_id, 0)
    node.beat()
    client.app.state.monitoring.maintain()
    summary = job(client, job_id)["efficiency"]
    assert summary["gpu_util_avg"] == 20.0 and summary["gpu_memory_peak_mb"] == 8000 and summary["readings"] == 10
    assert [h.split(":")[0] for h in summary["hints"]] == ["input-bound"]
    usage = client.get(f"/api/v1/jobs/{job_id}/usage", headers=auth(ALICE)).json()
    assert len(usage["timeline"]) == 10


def test_jobs_that_finish_together_each_keep_their_own_timeline(client: AsgiClient, node: MonitoredAgent) -> None:
    first, second = run_job(client, node, gpus=1), run_job(client, node, gpus=2)
    utils = {g: 30.0 for g in node.running[first].gpus} | {g: 80.0 for g in node.running[second].gpus}
    now = time.time()
    for k in range(5):
        node.read(now - 50 + 10 * k, util=utils)
    node.beat()
    node.exit(first, 0)
    node.exit(second, 1)
    node.beat()
    client.app.state.monitoring.maintain()
    for job_id, util in ((first, 30.0), (second, 80.0)):
        usage = client.get(f"/api/v1/jobs/{job_id}/usage", headers=auth(ALICE)).json()
        assert [p[1] for p in usage["timeline"]] == [util] * 5 and usage["efficiency"]["gpu_util_avg"] == util


# -- /metrics --------------------------------------------------------------------------------------------------


def test_metrics_for_prometheus(client: AsgiClient, node: MonitoredAgent, ctx: ServerContext) -> None:
    ctx.settings = dataclasses.replace(ctx.settings, metrics_names=True)  # nanum up --metrics-names
    run_job(client, node, gpus=2)
    submit(client, gpus=4)
    node.read(util=77.0)
    node.beat()
    tick(client)
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'nanum_gpu_utilization_percent{gpu="0",model="A100",node="gpu-01"} 77.0' in text
    assert 'nanum_gpu_allocated{gpu="0",lab="vision",node="gpu-01",user="alice"} 1.0' in text
    assert 'nanum_gpus{state="free"} 2.0' in text
    assert 'nanum_jobs{state="running"} 1.0' in text and 'nanum_jobs{state="pending"} 1.0' in text
    assert 'nanum_queue_length{lab="vision"} 1.0' in text
    assert 'nanum_job_wait_seconds_bucket{lab="vision",le="+Inf"} 1.0' in text
    assert "nanum_scheduler_cycle_seconds_count" in text and "nanum_scheduler_cycle_seconds_count 0.0" not in text


def test_metrics_name_no_user_or_lab_unless_the_server_allows_it(client: AsgiClient, node: MonitoredAgent) -> None:
    run_job(client, node, gpus=2)
    submit(client, gpus=4)
    submit(client, token=BOB, lab="nlp", gpus=4)
    node.beat()
    tick(client)
    text = client.get("/metrics").text
    assert "alice" not in text and "vision" not in text and "nlp" not in text and "bob" not in text
    assert 'nanum_gpu_allocated{gpu="0",node="gpu-01"} 1.0' in text
    assert "nanum_queue_length 2.0" in text  # both labs' pending jobs, summed
    assert 'nanum_job_wait_seconds_bucket{le="+Inf"} 1.0' in text and "nanum_job_wait_seconds_count 1.0" in text


def test_the_grafana_dashboard_asks_only_for_metrics_nanum_exports(client: AsgiClient, node: MonitoredAgent) -> None:
    run_job(client, node, gpus=1)
    node.read()
    node.beat()
    tick(client)
    exported = set(re.findall(r"(?m)^(nanum_[a-z_]+)", client.get("/metrics").text))
    dashboard = json.loads((Path(__file__).parents[2] / "deploy" / "grafana-dashboard.json").read_text())
    wanted = {m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(r"nanum_[a-z_]+", t["expr"])}
    assert wanted and wanted <= exported, wanted - exported


class Mailbox(socketserver.ThreadingTCPServer):
    """A minimal real SMTP server on a local port: it keeps every message it is given."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(self) -> None:
        self.messages: list[tuple[list[str], str]] = []
        box = self

        class Session(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                rcpt: list[str] = []
                self.wfile.write(b"220 test ESMTP\r\n")
                while line := self.rfile.readline().decode():
                    verb = line[:4].upper()
                    if verb == "DATA":
                        self.wfile.write(b"354 go on\r\n")
                        body = []
                        while (chunk := self.rfile.readline().decode()) != ".\r\n":
                            body.append(chunk)
                        box.messages.append((rcpt, "".join(body)))
                        reply = b"250 queued\r\n"
                    elif verb == "RCPT":
                        rcpt.append(line.split(":", 1)[1].strip(" <>\r\n"))
                        reply = b"250 ok\r\n"
                    elif verb == "QUIT":
                        self.wfile.write(b"221 bye\r\n")
                        return
                    else:
                        reply = b"250 ok\r\n"
                    self.wfile.write(reply)

        super().__init__(("127.0.0.1", 0), Session)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_the_owner_of_an_idle_job_gets_an_email(client: AsgiClient, node: MonitoredAgent) -> None:
    mailbox = Mailbox()
    try:
        port = mailbox.server_address[1]
        patch(client, "/monitoring/notify", {"smtp_host": "127.0.0.1", "smtp_port": port, "smtp_from": "gpus@lab"})
        patch(client, "/monitoring/idle", {"batch_flag_s": 600})
        r = client.request(
            "PUT", "/api/v1/users/alice/contact", json={"email": "alice@lab.example"}, headers=auth(ADMIN)
        )
        assert r.status_code == 200, r.text
        job_id = run_job(client, node, gpus=1)
        idle_for(node, 700)
        assert client.app.state.monitoring.notifier.flush()
        [(to, message)] = mailbox.messages
        assert to == ["alice@lab.example"]
        assert f"Subject: nanum: job {job_id} (python) is idle" in message and "looks idle and is flagged" in message
    finally:
        mailbox.shutdown()
        mailbox.server_close()


def _counted_afresh(ctx: ServerContext) -> dict[str, float]:
    """The job families' samples by definition, counted over every job by the database: jobs per state, pending
    jobs per lab, and each started job's wait (start - submit) per lab."""
    from sqlalchemy import case

    from nanum.server.metrics import WAIT_BUCKETS, _le
    from nanum.store import JobRow, LabRow

    out: dict[str, float] = {}
    wait = JobRow.start_time - JobRow.submit_time
    with ctx.db.read() as s:
        for state, n in s.execute(select(JobRow.state, func.count()).group_by(JobRow.state)):
            out[f'nanum_jobs{{state="{state}"}}'] = n
        pending = (JobRow.lab_id == LabRow.id) & (JobRow.state == "pending")
        for lab, n in s.execute(select(LabRow.name, func.count(JobRow.id)).join(JobRow, pending, isouter=True)
                                .group_by(LabRow.name)):
            out[f'nanum_queue_length{{lab="{lab}"}}'] = n
        for lab, n, total, *under in s.execute(
                select(LabRow.name, func.count(JobRow.id), func.sum(wait),
                       *(func.sum(case((wait <= b, 1), else_=0)) for b in WAIT_BUCKETS))
                .join(LabRow, LabRow.id == JobRow.lab_id).where(JobRow.start_time.is_not(None)).group_by(LabRow.name)):
            out[f'nanum_job_wait_seconds_count{{lab="{lab}"}}'] = n
            out[f'nanum_job_wait_seconds_sum{{lab="{lab}"}}'] = round(total, 3)
            for bound, k in zip(WAIT_BUCKETS, under, strict=True):
                out[f'nanum_job_wait_seconds_bucket{{lab="{lab}",le="{_le(bound)}"}}'] = k
            out[f'nanum_job_wait_seconds_bucket{{lab="{lab}",le="+Inf"}}'] = n
    return out


def _job_samples(text: str) -> dict[str, float]:
    found = re.findall(r'(?m)^((?:nanum_jobs|nanum_queue_length|nanum_job_wait_seconds_(?:count|sum|bucket))\{[^}]*\})'
                       r' (\S+)$', text)
    return {name: round(float(value), 3) if "_sum" in name else float(value) for name, value in found}


def test_metrics_count_jobs_as_they_change_between_scrapes(client: AsgiClient, node: MonitoredAgent,
                                                           ctx: ServerContext) -> None:
    """Each scrape reads only the jobs written since the last (`nanum.server.jobtally`), yet says what counting every
    job afresh says: a job that ends, one cancelled while waiting, and a finished one requeued, whose old wait
    leaves the histogram until it starts again."""
    ctx.settings = dataclasses.replace(ctx.settings, metrics_names=True)
    first = run_job(client, node, gpus=2)
    waiting = int(submit(client, gpus=4)["id"])  # type: ignore[call-overload]
    submit(client, token=BOB, lab="nlp", gpus=4)
    assert _job_samples(client.get("/metrics").text) == _counted_afresh(ctx)  # the first scrape: every job

    node.exit(first, 0)
    node.beat()
    assert client.post(f"/api/v1/jobs/{waiting}/cancel", headers=auth(ALICE)).status_code == 200
    tick(client)
    node.beat()
    seen = _job_samples(client.get("/metrics").text)
    assert seen == _counted_afresh(ctx)
    assert seen['nanum_jobs{state="completed"}'] == 1 and seen['nanum_jobs{state="cancelled"}'] == 1

    assert client.post(f"/api/v1/jobs/{first}/requeue", headers=auth(ALICE)).status_code == 200
    seen = _job_samples(client.get("/metrics").text)
    assert seen == _counted_afresh(ctx)
    assert 'nanum_jobs{state="completed"}' not in seen  # it waits again
