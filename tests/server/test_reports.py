"""The store's history for planning: the trace export and the usage report, with figures known to the second."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import update

from nanum.server.context import ServerContext
from nanum.store import JobRow, NodeRow, SegmentRow
from nanum.store.monitoring import JobStatsRow
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import BOB, auth, submit, tick
from tests.server.fakeagent import FakeAgent

HOUR = 3600.0


def _history(client: AsgiClient, agent: FakeAgent, ctx: ServerContext) -> list[int]:
    """Three finished jobs rewritten to known times: alice 2 GPUs x 2 h, alice 1 GPU x 1 h, bob (nlp) 1 GPU x 3 h,
    each waited 10 min; alice's 2-GPU job measured at 50% utilisation, idle in a quarter of its readings."""
    ids = [int(submit(client, gpus=2)["id"]), int(submit(client, gpus=1)["id"]),
           int(submit(client, BOB, lab="nlp", gpus=1)["id"])]
    tick(client)
    agent.beat()
    for i in ids:
        agent.exit(i)
    agent.beat()
    base = (time.time() // 86400.0 - 3) * 86400.0  # three UTC days ago, midnight
    with ctx.db.write() as s:
        for i, hours in zip(ids, (2, 1, 3), strict=True):
            s.execute(update(JobRow).where(JobRow.id == i).values(
                submit_time=base, start_time=base + 600, end_time=base + 600 + hours * HOUR))
            s.execute(update(SegmentRow).where(SegmentRow.job_id == i).values(
                start=base + 600, end=base + 600 + hours * HOUR, wait_s=600.0))
        s.add(JobStatsRow(job_id=ids[0], readings=100, util_sum=5000.0, idle=25))
    return ids


def test_usage_report_by_lab_and_user_has_the_known_figures(client: AsgiClient, agent: FakeAgent,
                                                             ctx: ServerContext) -> None:
    _history(client, agent, ctx)
    got = client.get("/api/v1/reports/usage", params={"since": _days_ago(7)}, headers=auth(BOB)).json()
    rows = {r["key"]: r for r in got["rows"]}
    assert rows["vision"]["gpu_hours"] == pytest.approx(5.0) and rows["nlp"]["gpu_hours"] == pytest.approx(3.0)
    assert rows["vision"]["gpu_util_percent"] == 50.0 and rows["vision"]["measured_gpu_hours"] == pytest.approx(4.0)
    assert rows["vision"]["idle_held_gpu_hours"] == pytest.approx(1.0)  # a quarter of 4 measured GPU-hours
    assert rows["nlp"]["gpu_util_percent"] is None  # no readings: unmeasured, not 0
    assert rows["vision"]["wait_p50_s"] == 600.0 and rows["vision"]["wait_p95_s"] == 600.0
    assert got["gpus"] == 4 and got["total"]["gpu_hours"] == pytest.approx(8.0)
    assert [u["key"] for u in got["top_users"]] == ["alice", "bob"]
    by_model = client.get("/api/v1/reports/usage", params={"since": _days_ago(7), "by": "gpu-model"},
                          headers=auth(BOB)).json()
    assert sum(r["gpu_hours"] for r in by_model["rows"]) == pytest.approx(8.0)
    by_week = client.get("/api/v1/reports/usage", params={"since": _days_ago(7), "by": "week"},
                         headers=auth(BOB)).json()
    assert all(re.fullmatch(r"\d{4}-W\d{2}", r["key"]) for r in by_week["rows"])
    assert sum(r["gpu_hours"] for r in by_week["rows"]) == pytest.approx(8.0)


def test_this_months_usage_is_measured_against_the_hours_gone_by(client: AsgiClient, agent: FakeAgent,
                                                                  ctx: ServerContext) -> None:
    """Early in a month, the hours still to come are not available yet: counting them said "0.0% used" of a
    cluster busy since it started."""
    job_id = int(submit(client, gpus=4)["id"])  # type: ignore[call-overload]
    tick(client)
    agent.beat()
    with ctx.db.write() as s:  # the node was registered just now: say ten minutes ago
        s.execute(update(NodeRow).values(created=NodeRow.created - 600))
    got = client.get("/api/v1/reports/usage", headers=auth(BOB)).json()
    assert got["until"] > datetime.now(UTC).isoformat()  # this month's window runs on
    assert got["available_gpu_hours"] == pytest.approx(4 * 600 / HOUR, rel=0.05)
    assert got["total"]["gpu_hours"] < got["available_gpu_hours"] and got["used_percent"] < 100
    agent.exit(job_id)
    agent.beat()


def test_usage_report_refuses_an_unknown_grouping(client: AsgiClient) -> None:
    r = client.get("/api/v1/reports/usage", params={"by": "month"}, headers=auth(BOB))
    assert r.status_code == 400 and "choose lab, user, gpu-model, day, week" in r.json()["detail"]


def test_trace_export_gives_each_started_job_its_run_time(client: AsgiClient, agent: FakeAgent,
                                                          ctx: ServerContext) -> None:
    ids = _history(client, agent, ctx)
    got = client.get("/api/v1/trace", headers=auth(BOB)).json()
    rows = {int(r["job_id"]): r for r in got["jobs"]}
    assert [rows[i]["duration"] for i in ids] == [2 * HOUR, 1 * HOUR, 3 * HOUR]
    assert [rows[i]["num_gpus"] for i in ids] == [2, 1, 1] and rows[ids[2]]["lab"] == "nlp"
    assert got["cluster"]["nodes"][0]["count"] == 1 and got["cluster"]["nodes"][0]["gpus"] == 4
    assert got["policy"] == ctx.policy.label


def _days_ago(days: int) -> str:
    return datetime.fromtimestamp(time.time() - days * 86400.0, UTC).strftime("%Y-%m-%d")


def test_the_dashboards_reports_page_shows_the_usage_charts(client: AsgiClient, agent: FakeAgent,
                                                            ctx: ServerContext) -> None:
    from tests.server.test_web import get, login

    _history(client, agent, ctx)
    cookies = login(client, BOB)
    r = get(client, "/reports", cookies)
    assert r.status_code == 200 and 'href="/reports" class="active"' in r.text
    assert r.text.count('src="data:image/png;base64,') == 3
    assert "<td>vision</td><td>5</td>" in r.text and "<td>nlp</td><td>3</td>" in r.text
    by_week = get(client, "/reports?by=week", cookies)
    assert by_week.status_code == 200 and "By week" in by_week.text
