"""Fair sharing through the real app: quotas set and audited, limits and budgets applied at the next cycle,
reclaim with each lab's grace and checkpoint-aware victims, lost work counted, usage exact to the second."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from nanum.core import HistoryPredictor
from nanum.server import snapshot
from nanum.server.context import ServerContext
from nanum.server.services import budgets, lifecycle
from nanum.store import JobRow
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth, count_calls, job, settle, submit, tick
from tests.server.fakeagent import FakeAgent


def seconds(stamp: object) -> float:
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()


def set_lab(client: AsgiClient, lab: str, **quota: object) -> dict[str, object]:
    r = client.patch(f"/api/v1/labs/{lab}", json=quota, headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def lab_detail(client: AsgiClient, lab: str) -> dict[str, object]:
    r = client.get(f"/api/v1/labs/{lab}", headers=auth(BOB))
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_a_quota_change_is_recorded_with_who_and_what_and_applies_at_the_next_cycle(
    client: AsgiClient, agent: FakeAgent
) -> None:
    set_lab(client, "vision", max_gpus=1, grace_s=5)
    first, second = submit(client, gpus=1), submit(client, gpus=1)
    tick(client)
    assert job(client, first["id"])["state"] == "running"
    waiting = job(client, second["id"])
    assert waiting["reason_code"] == "lab_limit" and "max_gpus 1" in str(waiting["reason"])
    assert "nanum lab set vision" in str(waiting["hint"])
    set_lab(client, "vision", max_gpus=4)
    tick(client)
    assert job(client, second["id"])["state"] == "running"
    history = lab_detail(client, "vision")["history"]
    assert [h["actor"] for h in history] == ["admin", "admin"]  # type: ignore[index]
    assert history[0]["changes"] == {"max_gpus": [None, 1], "grace_s": [None, 5.0]}  # type: ignore[index]
    assert history[1]["message"] == "admin set max_gpus 1 -> 4"  # type: ignore[index]


def test_only_an_admin_sets_quotas(client: AsgiClient) -> None:
    assert client.patch("/api/v1/labs/vision", json={"max_gpus": 1}, headers=auth(BOB)).status_code == 403
    assert client.patch("/api/v1/users/bob", json={"max_gpus": 1}, headers=auth(BOB)).status_code == 403
    assert client.patch("/api/v1/users/nobody", json={"max_gpus": 1}, headers=auth(ADMIN)).status_code == 404


def test_a_users_own_limit_holds_within_the_lab(client: AsgiClient, agent: FakeAgent) -> None:
    r = client.patch("/api/v1/users/alice", json={"max_running_jobs": 1}, headers=auth(ADMIN))
    assert r.status_code == 200 and r.json()["max_running_jobs"] == 1
    a1, a2, b1 = submit(client, gpus=1), submit(client, gpus=1), submit(client, BOB, gpus=1)
    tick(client)
    assert [job(client, j["id"])["state"] for j in (a1, a2, b1)] == ["running", "pending", "running"]
    assert job(client, a2["id"])["reason_code"] == "user_limit"
    users = {u["name"]: u for u in client.get("/api/v1/users", headers=auth(ADMIN)).json()}
    assert users["alice"]["max_running_jobs"] == 1 and users["bob"]["max_running_jobs"] is None


def test_a_lab_over_its_budget_starts_nothing_new_warns_and_starts_again_when_raised(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    set_lab(client, "vision", monthly_gpu_hours=0.01)
    running = submit(client, gpus=4)
    tick(client)
    agent.beat()
    started = time.time()
    waiting = submit(client, gpus=1)
    client.app.state.scheduler.tick(now=started + 10)  # 4 GPUs x 10 s > 36 GPU-seconds, counting the running job
    blocked = job(client, waiting["id"])
    assert blocked["state"] == "pending" and blocked["reason_code"] == "budget"
    assert "lab vision has used its 0.01 GPU-hours for" in str(blocked["reason"])
    assert "nanum lab set vision --monthly-gpu-hours" in str(blocked["hint"])
    assert job(client, running["id"])["state"] == "running"  # running jobs finish
    notes = [h for h in lab_detail(client, "vision")["history"] if h["action"] == "budget"]  # type: ignore[union-attr]
    assert [n["changes"]["level"] for n in notes] == [100]  # type: ignore[index]
    set_lab(client, "vision", monthly_gpu_hours=100.0)
    client.app.state.scheduler.tick(now=started + 10)
    assert job(client, waiting["id"])["state"] == "pending"  # no GPU free yet, but no longer the budget
    assert job(client, waiting["id"])["reason_code"] != "budget"


def test_budget_warnings_show_on_the_jobs_of_the_lab_at_80_percent(client: AsgiClient, agent: FakeAgent) -> None:
    set_lab(client, "vision", monthly_gpu_hours=0.0001)  # 0.36 GPU-seconds
    j = submit(client, gpus=4)
    tick(client)
    time.sleep(0.15)
    warning = job(client, j["id"])["budget_warning"]
    assert warning is not None and warning.startswith("lab vision has used its 0 GPU-hours")
    assert lab_detail(client, "vision")["budget"]["percent"] >= 100  # type: ignore[index]
    other = client.get("/api/v1/jobs", params={"user": "bob"}, headers=auth(BOB)).json()
    assert all(o["budget_warning"] is None for o in other)


def reclaim_setup(client: AsgiClient) -> None:
    set_lab(client, "vision", guaranteed_gpus=4)
    set_lab(client, "nlp", guaranteed_gpus=0, grace_s=1.5)


def test_a_borrower_gets_its_labs_grace_is_preempted_and_requeued_with_its_place_and_lost_work(
    client: AsgiClient, agent: FakeAgent
) -> None:
    reclaim_setup(client)
    borrower = submit(client, BOB, lab="nlp", gpus=4)
    tick(client)
    agent.beat()
    assert job(client, borrower["id"])["borrowing"] is True
    assert agent.running[borrower["id"]].grace_s == 1.5
    time.sleep(0.2)
    owner = submit(client, ALICE, gpus=4)
    tick(client)
    preempting = job(client, borrower["id"])
    assert preempting["state"] == "running" and str(preempting["reason"]).startswith("preempting: lab vision")
    assert job(client, owner["id"])["reason_code"] == "reclaiming"
    agent.beat()  # stops the borrower
    agent.beat()  # reports it gone: requeued
    requeued = job(client, borrower["id"])
    assert requeued["state"] == "pending" and requeued["preemptions"] == 1 and requeued["runs"] == 1
    assert requeued["submit_time"] == borrower["submit_time"]
    assert 0.2 * 4 / 3600 < requeued["lost_gpu_hours"] < 5 * 4 / 3600
    assert [s["outcome"] for s in requeued["segments"]] == ["preempted"]
    tick(client)
    assert job(client, owner["id"])["state"] == "running"


def test_reclaim_takes_the_borrower_that_loses_the_least_work_since_its_checkpoint(
    client: AsgiClient, agent: FakeAgent
) -> None:
    reclaim_setup(client)
    older = submit(client, BOB, lab="nlp", gpus=2)
    tick(client)
    agent.beat()
    time.sleep(0.05)
    younger = submit(client, BOB, lab="nlp", gpus=2)
    tick(client)
    agent.beat()
    time.sleep(0.3)
    saved = agent.checkpoints[older["id"]] = time.time()  # the older one has just saved its state
    agent.beat()
    assert job(client, older["id"])["last_checkpoint"] is not None
    submit(client, ALICE, gpus=2)
    tick(client)
    assert job(client, older["id"])["reason"].startswith("preempting")  # type: ignore[union-attr]
    assert job(client, younger["id"])["reason"] is None
    agent.beat()
    agent.beat()
    lost = 3600 * job(client, older["id"])["lost_gpu_hours"]  # type: ignore[operator]
    assert 0 < lost <= 2 * (time.time() - saved)  # counted from the checkpoint (0.35 s after the start), not the start


def test_a_job_reports_its_checkpoint_through_the_api(client: AsgiClient, agent: FakeAgent) -> None:
    j = submit(client, gpus=1)
    assert client.post(f"/api/v1/jobs/{j['id']}/checkpoint", headers=auth(ALICE)).status_code == 409
    tick(client)
    r = client.post(f"/api/v1/jobs/{j['id']}/checkpoint", headers=auth(ALICE))
    assert r.status_code == 200 and r.json()["last_checkpoint"] is not None
    assert client.post(f"/api/v1/jobs/{j['id']}/checkpoint", headers=auth(BOB)).status_code == 403


def test_usage_equals_the_sum_of_the_allocations_to_the_second(client: AsgiClient, agent: FakeAgent) -> None:
    ids = [submit(client, gpus=g)["id"] for g in (1, 2)] + [submit(client, BOB, lab="nlp", gpus=1)["id"]]
    tick(client)
    agent.beat()
    time.sleep(0.3)
    for i in ids:
        agent.exit(i)
    agent.beat()
    expected: dict[str, float] = {}
    for j in (job(client, i) for i in ids):
        held = j["gpus"] * (seconds(j["end_time"]) - seconds(j["start_time"]))  # type: ignore[operator]
        expected[str(j["user"])] = expected.get(str(j["user"]), 0.0) + held
        assert [s["outcome"] for s in j["segments"]] == ["completed"]  # type: ignore[union-attr]
    got = client.get("/api/v1/usage", params={"by": "user"}, headers=auth(BOB)).json()
    assert {r["key"]: r["gpu_seconds"] for r in got["rows"]} == pytest.approx(expected, abs=0.01)  # ISO times carry ms
    assert {r["key"]: r["jobs"] for r in got["rows"]} == {"alice": 2, "bob": 1}
    assert got["total"]["gpu_seconds"] == pytest.approx(sum(expected.values()), abs=0.01)
    by_lab = client.get("/api/v1/usage", headers=auth(BOB)).json()
    assert by_lab["by"] == "lab" and {r["key"] for r in by_lab["rows"]} == {"vision", "nlp"}
    mine = client.get("/api/v1/usage", params={"user": "alice"}, headers=auth(BOB)).json()
    assert mine["by"] == "day" and mine["total"]["jobs"] == 2
    assert mine["rows"][0]["avg_wait_s"] is not None


@pytest.mark.parametrize(
    ("params", "message"),
    [
        pytest.param({"month": "2026-13"}, "invalid month", id="bad-month"),
        pytest.param({"since": "yesterday"}, "invalid since", id="bad-date"),
        pytest.param({"since": "2026-11-02", "until": "2026-11-01"}, "must be after", id="reversed"),
        pytest.param({"by": "week"}, "choose day, user or lab", id="bad-group"),
    ],
)
def test_usage_refuses_bad_windows_in_one_line(client: AsgiClient, params: dict[str, str], message: str) -> None:
    r = client.get("/api/v1/usage", params=params, headers=auth(BOB))
    assert r.status_code == 400 and message in r.json()["detail"]


def test_usage_splits_by_day_and_clips_to_the_window(client: AsgiClient, ctx: ServerContext) -> None:
    from nanum.server.services import usage

    day = 86400.0 * 20000  # a UTC midnight
    win = usage.Window(day - 3600, day + 3600)
    piece = usage.Piece(1, "alice", "vision", 2, day - 7200, day + 1800, 5.0, 0.0)
    assert usage._split(piece, win, "day") == [
        (time.strftime("%Y-%m-%d", time.gmtime(day - 1)), day - 3600, day),
        (time.strftime("%Y-%m-%d", time.gmtime(day)), day, day + 1800),
    ]
    assert lifecycle.by_month(1, day - 10, day + 10) in (
        [(lifecycle.month_of(day), 20.0)],
        [(lifecycle.month_of(day - 10), 10.0), (lifecycle.month_of(day), 10.0)],
    )


def test_priority_breaks_each_pending_job_into_factors(client: AsgiClient, agent: FakeAgent) -> None:
    blocker = submit(client, gpus=4)
    tick(client)
    assert job(client, blocker["id"])["state"] == "running"
    waiting = [submit(client, gpus=1, priority=50)["id"], submit(client, BOB, gpus=2)["id"]]
    array = int(submit(client, BOB, gpus=2, array="3-4")["id"])  # type: ignore[call-overload]
    got = client.get("/api/v1/priority", headers=auth(BOB)).json()
    assert [j["job_id"] for j in got["jobs"]][:2] == waiting and [j["rank"] for j in got["jobs"]] == [1, 2, 3, 4]
    assert [j["job_ref"] for j in got["jobs"]] == [str(waiting[0]), str(waiting[1]), f"{array}_3", f"{array}_4"]
    first = got["jobs"][0]
    assert set(first["factors"]) == {"age", "fairshare", "priority", "size"} and first["factors"]["priority"] == 0.5
    assert first["priority"] == pytest.approx(sum(got["weights"][k] * v for k, v in first["factors"].items()), 0.01)
    assert [
        j["job_id"] for j in client.get("/api/v1/priority", params={"user": "bob"}, headers=auth(BOB)).json()["jobs"]
    ] == [waiting[1], array, array + 1]


def test_priority_on_a_large_cluster_orders_the_queue_once_for_every_request_of_the_second(
    client: AsgiClient, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ordering the queue is slow (a large cluster; here, by lowering the threshold), the requests of the
    next second share one order, each still given its own rows; a small cluster's is ordered for every request."""
    from nanum.server import context
    from nanum.server.services import priority

    orders = count_calls(monkeypatch, priority, "_ordered")
    monkeypatch.setattr(context, "SHARE_AFTER_S", 10.0)  # no order of a small queue takes as long, however busy
    mine = submit(client, gpus=1)["id"]
    assert [j["job_id"] for j in client.get("/api/v1/priority", headers=auth(ALICE)).json()["jobs"]] == [mine]
    theirs = submit(client, BOB, gpus=1)["id"]
    assert [j["job_id"] for j in client.get("/api/v1/priority", headers=auth(ALICE)).json()["jobs"]] == [mine, theirs]
    assert len(orders) == 2
    monkeypatch.setattr(context, "SHARE_AFTER_S", 0.0)
    monkeypatch.setattr(context, "SHARE_FOR_S", 60.0)  # however slow the requests below
    everyone = client.get("/api/v1/priority", headers=auth(ALICE)).json()["jobs"]
    bobs = client.get("/api/v1/priority", params={"user": "bob"}, headers=auth(BOB)).json()["jobs"]
    assert len(orders) == 3 and [j["job_id"] for j in bobs] == [theirs] and bobs[0]["rank"] == everyone[1]["rank"]


def test_a_job_larger_than_the_users_own_cap_is_refused_at_once(client: AsgiClient, agent: FakeAgent) -> None:
    assert client.patch("/api/v1/users/alice", json={"max_gpus": 1}, headers=auth(ADMIN)).status_code == 200
    r = client.post("/api/v1/jobs", json={"command": ["true"], "gpus": 2}, headers=auth(ALICE))
    assert r.status_code == 400 and r.json()["detail"].endswith("needs 2 GPUs; user alice has max_gpus 1")
    submit(client, gpus=1)


def running_row(user_id: int, lab_id: int, gpus: int, started: float) -> JobRow:
    """A job row running since `started`, charged up to then, as a test stores it directly."""
    return JobRow(name="t", user_id=user_id, lab_id=lab_id, command=["true"], workdir="/", env={}, gpus=gpus,
                  nodes=1, cpus=0, priority=0, kind="batch", preemptible=True, state="running", borrowing=False,
                  allocation=[], submit_time=started - 1, start_time=started, charged_until=started, runs=1,
                  attained_gpu_seconds=0.0)


def test_fair_share_usage_decays_with_the_servers_half_life(ctx: ServerContext) -> None:
    from sqlalchemy import select

    from nanum.store import LabRow, UserRow

    now = time.time()
    with ctx.db.write() as s:
        lab = s.scalars(select(LabRow).where(LabRow.name == "vision")).one()
        lab.decayed_usage, lab.decayed_at = 100.0, now - 10.0
        alice = s.scalars(select(UserRow).where(UserRow.name == "alice")).one()
        job_row = running_row(alice.id, lab.id, gpus=2, started=now - 1.5)
        s.add(job_row)
        s.flush()
        lifecycle.charge(s, job_row, now, outcome="completed")
    with ctx.db.read() as s:  # the lab is charged by the scheduler's next tick, not by the heartbeat ...
        assert s.scalars(select(LabRow.decayed_usage).where(LabRow.name == "vision")).one() == 100.0
        # ... and a cycle before that counts the run all the same
        seen = snapshot.build(s, now, 60.0, HistoryPredictor(), None, 10.0).snapshot
        assert budgets.month_seconds(s, now)[("lab", "vision")] == pytest.approx(3.0)  # and so does its budget
    assert seen.labs["vision"].decayed_usage == pytest.approx(50.0 + 3.0)
    assert seen.users["alice"].decayed_usage == pytest.approx(3.0)
    assert seen.labs["vision"].used_gpu_hours == pytest.approx(3.0 / 3600)
    assert settle(ctx.db, 10.0) == 1  # half-life 10 s: 100 then counts 50
    assert settle(ctx.db, 10.0) == 0  # a segment is charged once
    with ctx.db.read() as s:
        lab = s.scalars(select(LabRow).where(LabRow.name == "vision")).one()
        assert lab.decayed_usage == pytest.approx(50.0 + 3.0)
        assert lab.decayed_at == now


def test_ticks_close_together_charge_an_ended_run_once_and_show_it_meanwhile(
        client: AsgiClient, ctx: ServerContext, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy import func, select

    from nanum.server import scheduler
    from nanum.store import LabRow, SegmentRow

    monkeypatch.setattr(scheduler, "SETTLE_EVERY_S", 60.0)
    tick(client)  # settles what there is (nothing) and starts the clock
    done = submit(client, gpus=1, cpus=0)
    tick(client)
    agent.beat()
    time.sleep(0.05)
    agent.exit(done["id"])
    agent.beat()

    def shown() -> float:
        r = client.get("/api/v1/labs/vision", headers=auth(ALICE))
        assert r.status_code == 200, r.text
        return float(r.json()["used_gpu_hours"])

    def charged() -> tuple[int, float]:
        with ctx.db.read() as s:
            return (s.scalar(select(func.count()).select_from(SegmentRow).where(SegmentRow.settled.is_(False))) or 0,
                    s.scalars(select(LabRow.decayed_usage).where(LabRow.name == "vision")).one())

    tick(client)  # within SETTLE_EVERY_S of the last settling: the run is not charged yet ...
    assert charged() == (1, 0.0)
    before = shown()
    assert before > 0  # ... but the lab's month already counts it
    client.app.state.scheduler.tick(now=time.time() + 61.0)
    unsettled, usage = charged()
    assert unsettled == 0 and usage > 0
    assert shown() == before  # charged once: the month's figure did not double


def test_a_job_that_must_not_be_preempted_never_borrows_and_says_what_would_help(
        client: AsgiClient, agent: FakeAgent) -> None:
    reclaim_setup(client)
    firm = submit(client, BOB, lab="nlp", gpus=1, preemptible=False)
    loose = submit(client, BOB, lab="nlp", gpus=1)
    tick(client)
    waiting = job(client, firm["id"])
    assert waiting["state"] == "pending" and waiting["reason_code"] == "lab_limit"
    assert "never borrows" in str(waiting["reason"]) and "without it" in str(waiting["hint"])
    assert job(client, loose["id"])["borrowing"] is True


def test_a_requeued_job_waits_behind_fresh_jobs_for_the_service_it_already_had(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    from sqlalchemy import update

    from nanum.store import JobRow

    reclaim_setup(client)
    long_run = submit(client, BOB, lab="nlp", gpus=4)
    tick(client)
    agent.beat()
    two_hours_ago = time.time() - 7200
    with ctx.db.write() as s:  # it has been running for two hours: 8 GPU-hours of service
        s.execute(update(JobRow).where(JobRow.id == long_run["id"]).values(start_time=two_hours_ago,
                                                                            charged_until=two_hours_ago))
    owner = submit(client, ALICE, gpus=4)
    tick(client)
    agent.beat()
    agent.beat()
    assert job(client, long_run["id"])["state"] == "pending"
    tick(client)
    agent.beat()
    fresh = submit(client, BOB, lab="nlp", gpus=4)
    tick(client)
    agent.exit(owner["id"])
    agent.beat()
    tick(client)
    assert job(client, fresh["id"])["state"] == "running"  # fewest GPU-hours so far goes first
    assert job(client, long_run["id"])["state"] == "pending"


def test_a_job_backfilled_over_a_reservation_yields_when_the_reserved_job_can_start(
    client: AsgiClient, agent: FakeAgent
) -> None:
    first = submit(client, gpus=2, time_limit_s=3600)
    tick(client)
    agent.beat()
    wide = submit(client, gpus=4)  # reserved for when job `first` reaches its limit
    late = submit(client, gpus=1, command=["python", "eval.py"])  # no limit: it would delay that reservation
    tick(client)
    agent.beat()
    assert job(client, wide["id"])["reason_code"] == "reserved"
    over = job(client, late["id"])
    assert over["state"] == "running" and over["over_reservation"] is True
    assert job(client, first["id"])["over_reservation"] is False
    agent.exit(first["id"])
    agent.beat()
    tick(client)  # 3 GPUs free: the wide job takes the fourth back
    assert job(client, late["id"])["reason"] == (
        f"preempting: job {wide['id']} takes back the GPUs reserved for it; job {late['id']} was backfilled over "
        "that reservation")
    assert job(client, wide["id"])["reason_code"] == "preempting"
    agent.beat()  # stops it
    agent.beat()  # reports it gone: requeued
    requeued = job(client, late["id"])
    assert requeued["state"] == "pending" and requeued["preemptions"] == 1 and requeued["over_reservation"] is False
    tick(client)
    assert job(client, wide["id"])["state"] == "running"


def test_a_users_priority_puts_their_own_job_first_and_priority_agrees_with_the_reasons(
    client: AsgiClient, agent: FakeAgent
) -> None:
    blocker = submit(client, gpus=4)
    tick(client)
    assert job(client, blocker["id"])["state"] == "running"
    low, high = submit(client, gpus=1)["id"], submit(client, gpus=1, priority=50)["id"]
    tick(client)
    got = client.get("/api/v1/priority", headers=auth(ALICE)).json()
    assert [(j["job_id"], j["rank"]) for j in got["jobs"]] == [(high, 1), (low, 2)]
    assert str(job(client, high)["reason"]).startswith("next in line")
    assert str(job(client, low)["reason"]).startswith("1 job ahead")


def test_runs_of_one_lab_ending_at_once_are_all_charged(ctx: ServerContext) -> None:
    """Heartbeats of several nodes end jobs of one lab at the same moment: none waits for another on the lab's
    row, and the next tick charges every run to the lab."""
    import threading

    from sqlalchemy import select

    from nanum.store import JobRow, LabRow, UsageRow, UserRow

    now = time.time()
    with ctx.db.write() as s:
        lab = s.scalars(select(LabRow).where(LabRow.name == "vision")).one()
        lab.decayed_usage, lab.decayed_at = 0.0, now - 100.0
        alice = s.scalars(select(UserRow).where(UserRow.name == "alice")).one()
        ids = []
        for _ in range(4):
            row = running_row(alice.id, lab.id, gpus=1, started=now - 10)
            s.add(row)
            s.flush()
            ids.append(row.id)
    ready = threading.Barrier(len(ids))

    def end(job_id: int) -> None:
        with ctx.db.write() as s:
            job_row = s.get(JobRow, job_id)
            assert job_row is not None
            lifecycle.charge(s, job_row, now, outcome="completed")
            if not ctx.db.is_sqlite:  # SQLite runs one writer at a time: nothing to wait for
                ready.wait(timeout=10)

    threads = [threading.Thread(target=end, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert settle(ctx.db, 1e9) == 4
    with ctx.db.read() as s:
        lab = s.scalars(select(LabRow).where(LabRow.name == "vision")).one()
        assert lab.decayed_usage == pytest.approx(4 * 10.0, rel=1e-6)
        used = s.scalars(select(UsageRow.gpu_seconds).where(UsageRow.kind == "lab", UsageRow.name == "vision")).all()
        assert sum(used) == pytest.approx(4 * 10.0)
