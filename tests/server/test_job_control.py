"""Holds, modify, top, requeue, retries, dependencies and arrays, through the real app and heartbeats."""

from __future__ import annotations

from sqlalchemy import select

from nanum.server.context import ServerContext
from nanum.store import EventRow, SegmentRow
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent


def post(client: AsgiClient, url: str, token: str = ALICE, **body: object) -> dict[str, object]:
    r = client.post(url, json=body or None, headers=auth(token))
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def cycle(client: AsgiClient, agent: FakeAgent) -> None:
    tick(client)
    agent.beat()


def test_hold_keeps_a_job_from_starting_until_released(client: AsgiClient, agent: FakeAgent) -> None:
    j = submit(client, gpus=1)["id"]
    held = post(client, f"/api/v1/jobs/{j}/hold")
    assert held["state"] == "held" and f"nanum release {j}" in str(held["reason"])
    cycle(client, agent)
    assert job(client, j)["state"] == "held" and not agent.running
    r = client.post(f"/api/v1/jobs/{j}/hold", headers=auth(BOB))
    assert r.status_code == 403
    assert post(client, f"/api/v1/jobs/{j}/release")["state"] == "pending"
    cycle(client, agent)
    assert job(client, j)["state"] == "running"
    r = client.post(f"/api/v1/jobs/{j}/hold", headers=auth(ALICE))
    assert r.status_code == 409 and "cannot be held" in r.json()["detail"]


def test_modify_a_pending_job_within_limits(client: AsgiClient, agent: FakeAgent) -> None:
    blocker = submit(client, gpus=4)["id"]
    cycle(client, agent)
    j = submit(client, gpus=2, time_limit_s=60)["id"]
    r = client.patch(f"/api/v1/jobs/{j}", json={"gpus": 9}, headers=auth(ALICE))
    assert r.status_code == 400 and "can never run" in r.json()["detail"]
    r = client.patch(f"/api/v1/jobs/{j}", json={"lab": "nlp"}, headers=auth(ALICE))
    assert r.status_code == 403
    r = client.patch(f"/api/v1/jobs/{j}", json={"gpus": 0, "name": "small", "time_limit_s": 120, "priority": 7},
                     headers=auth(ALICE))
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["gpus"], got["name"], got["time_limit_s"], got["priority"]) == (0, "small", 120, 7)
    cycle(client, agent)
    assert job(client, j)["state"] == "running"  # needs no GPU now: starts beside the blocker
    r = client.patch(f"/api/v1/jobs/{blocker}", json={"gpus": 1}, headers=auth(ALICE))
    assert r.status_code == 409 and "only a pending or held job" in r.json()["detail"]
    r = client.patch(f"/api/v1/jobs/{j}", json={"lab": "nlp"}, headers=auth(ADMIN))
    assert r.status_code == 409


def test_modify_what_and_where_a_waiting_job_runs(client: AsgiClient, ctx: ServerContext, agent: FakeAgent) -> None:
    """A job that waits for a node label no node has any more is changed to run without it, keeping its place; a
    request no node could meet is refused as at submission; null makes the GPU model and memory any again."""
    label = client.patch(f"/api/v1/nodes/{agent.name}", json={"labels": ["net=ib"]}, headers=auth(ADMIN))
    assert label.status_code == 200, label.text
    blocker = submit(client, gpus=4)["id"]
    cycle(client, agent)
    j = submit(client, gpus=1, constraints=["net=ib"], gpu_model="A100", gpu_memory_mb=40960)["id"]
    for body, said in (({"constraints": ["net=roce"]}, "needs node label net=roce"),
                       ({"gpu_model": "H100"}, "needs GPU model H100"),
                       ({"gpu_memory_mb": 163840}, "at least 163840 MiB"),
                       ({"nodes": 2}, "2 nodes"),
                       ({"constraints": ["bad label"]}, "string should match pattern")):
        r = client.patch(f"/api/v1/jobs/{j}", json=body, headers=auth(ALICE))
        assert r.status_code in (400, 422) and said in r.json()["detail"], (body, r.text)
    unchanged = job(client, j)
    assert (unchanged["constraints"], unchanged["gpu_model"], unchanged["nodes"]) == (["net=ib"], "A100", 1)
    client.patch(f"/api/v1/nodes/{agent.name}", json={"labels": ["net="]}, headers=auth(ADMIN))
    cycle(client, agent)
    assert "net=ib" in str(job(client, j)["reason"])
    r = client.patch(f"/api/v1/jobs/{j}", json={"priority": 5}, headers=auth(ALICE))  # still needs the label
    assert r.status_code == 400 and "needs node label net=ib" in r.json()["detail"]
    r = client.patch(f"/api/v1/jobs/{j}", json={"constraints": [], "gpu_model": None, "gpu_memory_mb": None,
                                                 "cpus": 2, "memory_mb": 2048}, headers=auth(ALICE))
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["constraints"], got["gpu_model"], got["gpu_memory_mb"]) == ([], None, None)
    assert (got["cpus"], got["memory_mb"], got["state"]) == (2, 2048, "pending")
    with ctx.db.read() as s:
        said = s.scalar(select(EventRow.message).where(EventRow.job_id == j, EventRow.kind == "modified"))
    assert said == "by alice: gpu_model any, gpu_memory_mb any, constraints none, cpus 2, memory_mb 2048"
    agent.exit(int(blocker))  # type: ignore[call-overload]
    agent.beat()
    cycle(client, agent)
    assert job(client, j)["state"] == "running"


def top_after_a_blocker(client: AsgiClient, agent: FakeAgent, first_tier: int = 0) -> tuple[object, object]:
    """Two 4-GPU jobs wait behind a running one; the first is put in `first_tier` by an admin, the second is moved
    to the top by its owner, and the running one ends: (first, second)."""
    blocker = submit(client, gpus=4)["id"]
    cycle(client, agent)
    first, second = (submit(client, gpus=4)["id"] for _ in range(2))
    if first_tier:
        r = client.patch(f"/api/v1/jobs/{first}", json={"tier": first_tier}, headers=auth(ADMIN))
        assert r.status_code == 200, r.text
    post(client, f"/api/v1/jobs/{second}/top")
    agent.exit(int(blocker))  # type: ignore[call-overload]
    agent.beat()
    cycle(client, agent)
    return first, second


def test_a_job_submitted_held_waits_until_released(client: AsgiClient, agent: FakeAgent) -> None:
    held = submit(client, gpus=1, hold=True)
    array = submit(client, gpus=1, array="0-1", hold=True)
    assert (held["state"], held["reason"]) == (
        "held", f"held by alice at submission; `nanum release {held['id']}` lets it run")
    tasks = client.get(f"/api/v1/jobs?array={array['id']}", headers=auth(ALICE)).json()
    assert [(t["state"], t["reason"]) for t in tasks] == [
        ("held", f"held by alice at submission; `nanum release {array['id']}` lets it run")] * 2
    cycle(client, agent)
    assert agent.running == {}
    post(client, f"/api/v1/jobs/{held['id']}/release")
    post(client, f"/api/v1/jobs/{array['id']}/release")
    cycle(client, agent)
    assert sorted(agent.running) == sorted([held["id"], *(t["id"] for t in tasks)])


def test_top_moves_a_job_before_its_owners_others(client: AsgiClient, agent: FakeAgent) -> None:
    first, second = top_after_a_blocker(client, agent)
    assert job(client, second)["state"] == "running"
    assert job(client, first)["state"] == "pending"


def test_top_stays_behind_a_job_an_admin_put_in_a_higher_tier(client: AsgiClient, agent: FakeAgent) -> None:
    first, second = top_after_a_blocker(client, agent, first_tier=1)
    assert job(client, first)["state"] == "running"
    assert job(client, second)["state"] == "pending"


def test_top_on_an_arrays_id_moves_all_its_waiting_tasks_in_their_order(client: AsgiClient,
                                                                        agent: FakeAgent) -> None:
    blocker = int(submit(client, gpus=4)["id"])  # type: ignore[call-overload]
    cycle(client, agent)
    first = int(submit(client, gpus=4)["id"])  # type: ignore[call-overload]
    array = int(submit(client, gpus=4, array="0-1")["id"])  # type: ignore[call-overload]
    tasks = [t["id"] for t in client.get(f"/api/v1/jobs?array={array}", headers=auth(ALICE)).json()]
    post(client, f"/api/v1/jobs/{array}/top")
    ran = []
    for ending in (blocker, tasks[0], tasks[1]):
        agent.exit(ending)
        agent.beat()
        cycle(client, agent)
        ran += [j for j in agent.running if j not in ran]
    assert ran == [tasks[0], tasks[1], first]  # the array, as moved, before the job submitted ahead of it


def test_retries_run_a_failing_job_again_keeping_each_exit_code(client: AsgiClient, agent: FakeAgent) -> None:
    j = int(submit(client, gpus=1, retries=2)["id"])  # type: ignore[call-overload]
    for code in (3, 4, 5):
        cycle(client, agent)
        assert job(client, j)["state"] == "running"
        agent.exit(j, code=code)
        agent.beat()
    got = job(client, j)
    assert got["state"] == "failed" and got["exits"] == [3, 4, 5] and got["runs"] == 3


def test_requeue_stops_a_running_job_and_runs_it_again(client: AsgiClient, agent: FakeAgent) -> None:
    j = int(submit(client, gpus=1)["id"])  # type: ignore[call-overload]
    cycle(client, agent)
    post(client, f"/api/v1/jobs/{j}/requeue")
    agent.beat()  # the agent stops it
    agent.beat()
    got = job(client, j)
    assert got["state"] == "pending" and "requeued" in str(got["reason"])
    cycle(client, agent)
    assert job(client, j)["state"] == "running" and job(client, j)["runs"] == 2
    agent.exit(j, code=0)
    agent.beat()
    post(client, f"/api/v1/jobs/{j}/requeue")
    cycle(client, agent)
    assert job(client, j)["runs"] == 3


def test_requeue_on_an_arrays_id_queues_its_running_and_ended_tasks_again(client: AsgiClient,
                                                                          agent: FakeAgent) -> None:
    array = int(submit(client, gpus=0, array="0-2%2")["id"])  # type: ignore[call-overload]
    cycle(client, agent)
    done, running, waiting = (t["id"] for t in client.get(f"/api/v1/jobs?array={array}", headers=auth(ALICE)).json())
    agent.exit(done)
    agent.beat()
    assert [job(client, j)["state"] for j in (done, running, waiting)] == ["completed", "running", "pending"]
    post(client, f"/api/v1/jobs/{array}/requeue")
    agent.beat()  # the agent stops the running task
    agent.beat()
    got = [job(client, j) for j in (done, running, waiting)]
    assert [g["state"] for g in got] == ["pending"] * 3
    assert [("requeue" in str(g["reason"])) for g in got] == [True, True, False]  # the waiting one was left as is
    r = client.post(f"/api/v1/jobs/{array}/requeue", headers=auth(ALICE))
    assert (r.status_code, r.json()["detail"]) == (409, f"array {array}'s tasks are pending, not running or ended; "
                                                        "they are already waiting to run")
    cycle(client, agent)
    assert sorted(agent.running) == sorted([done, running])  # at most 2 at once, in the array's order
    assert job(client, done)["runs"] == 2


def test_a_chain_runs_in_order_and_a_failure_cancels_the_rest(client: AsgiClient, agent: FakeAgent) -> None:
    a = int(submit(client, gpus=1)["id"])  # type: ignore[call-overload]
    b = int(submit(client, gpus=1, after_ok=[str(a)])["id"])  # type: ignore[call-overload]
    c = int(submit(client, gpus=1, after_ok=[str(b)])["id"])  # type: ignore[call-overload]
    keep = int(submit(client, gpus=1, after_ok=[str(b)], keep_if_unmet=True)["id"])  # type: ignore[call-overload]
    cleanup = int(submit(client, gpus=1, after_failed=[str(a)])["id"])  # type: ignore[call-overload]
    cycle(client, agent)
    assert set(agent.running) == {a}
    assert job(client, b)["reason"] == f"waiting for job {a} to complete (--after-ok {a})"
    assert job(client, b)["reason_code"] == "dependency"
    agent.exit(a, code=0)
    agent.beat()
    got = job(client, cleanup)
    assert got["state"] == "cancelled" and f"job {a} completed" in str(got["reason"])
    cycle(client, agent)
    assert set(agent.running) == {b}
    agent.exit(b, code=1)
    agent.beat()
    got = job(client, c)
    assert got["state"] == "cancelled"
    assert got["reason"] == f"cancelled: dependency can never be met: job {b} failed (--after-ok {b})"
    assert job(client, keep)["state"] == "pending"
    cycle(client, agent)
    assert not agent.running


def test_jobs_that_end_in_one_report_each_settle_their_own_dependents(
    client: AsgiClient, agent: FakeAgent, ctx: ServerContext
) -> None:
    """A node reports several ends at once (its jobs' writes are then made together): each job gets its own outcome,
    run segment and event, and each job waiting on them hears of the one it names."""
    ok, bad, both = (int(submit(client, gpus=1)["id"]) for _ in range(3))  # type: ignore[call-overload]
    after_ok = int(submit(client, gpus=1, after_ok=[str(ok)])["id"])  # type: ignore[call-overload]
    after_bad = int(submit(client, gpus=1, after_ok=[str(bad)])["id"])  # type: ignore[call-overload]
    after_all = int(submit(client, gpus=1, after_ok=[str(ok), str(both)])["id"])  # type: ignore[call-overload]
    cycle(client, agent)
    assert set(agent.running) == {ok, bad, both}
    agent.exit(ok, code=0)
    agent.exit(bad, code=7)
    agent.exit(both, code=0)
    agent.beat()
    assert [job(client, j)["state"] for j in (ok, bad, both)] == ["completed", "failed", "completed"]
    assert job(client, bad)["exits"] == [7]
    got = job(client, after_bad)
    assert got["state"] == "cancelled"
    assert got["reason"] == f"cancelled: dependency can never be met: job {bad} failed (--after-ok {bad})"
    for waiting in (after_ok, after_all):
        assert job(client, waiting)["reason"] == "dependencies met; waiting for the scheduler"
    with ctx.db.read() as s:
        for j in (ok, bad, both):
            kinds = list(s.scalars(select(EventRow.kind).where(EventRow.job_id == j).order_by(EventRow.id)))
            assert kinds[-1] == ("failed" if j == bad else "completed") and kinds.count(kinds[-1]) == 1
            [(gpus, outcome)] = s.execute(select(SegmentRow.gpus, SegmentRow.outcome).where(SegmentRow.job_id == j))
            assert gpus == 1 and outcome == ("failed" if j == bad else "completed")
    cycle(client, agent)
    assert set(agent.running) == {after_ok, after_all}


def test_a_dependency_that_cannot_be_met_is_refused_at_submit(client: AsgiClient) -> None:
    r = client.post("/api/v1/jobs", json={"command": ["x"], "after_ok": ["999"]}, headers=auth(ALICE))
    assert r.status_code == 400 and "no job 999" in r.json()["detail"]


def test_an_array_runs_at_most_its_limit_with_task_ids(client: AsgiClient, agent: FakeAgent) -> None:
    first = submit(client, gpus=0, array="0-9%3")
    array = int(first["id"])  # type: ignore[call-overload]
    r = client.get(f"/api/v1/jobs?array={array}", headers=auth(ALICE))
    tasks = r.json()
    assert [t["array_task"] for t in tasks] == list(range(10))
    assert tasks[5]["reason_code"] == "array_limit" and "at most 3" in tasks[5]["reason"]
    seen: dict[int, str] = {}
    for _ in range(10):
        cycle(client, agent)
        assert len(agent.running) <= 3
        for j, launch in list(agent.running.items()):
            seen[j] = launch.env["NANUM_ARRAY_TASK_ID"]
            assert launch.env["NANUM_ARRAY_JOB_ID"] == str(array)
            agent.exit(j)
        agent.beat()
    assert sorted(int(t) for t in seen.values()) == list(range(10))


def test_cancel_and_hold_an_array_or_one_task(client: AsgiClient, agent: FakeAgent) -> None:
    array = int(submit(client, gpus=0, array="1,3,5-7")["id"])  # type: ignore[call-overload]
    tasks = client.get(f"/api/v1/jobs?array={array}", headers=auth(ALICE)).json()
    assert [t["array_task"] for t in tasks] == [1, 3, 5, 6, 7]
    post(client, f"/api/v1/jobs/{tasks[2]['id']}/hold")
    post(client, f"/api/v1/jobs/{array}/cancel?one=true")
    states = [t["state"] for t in client.get(f"/api/v1/jobs?array={array}", headers=auth(ALICE)).json()]
    assert states == ["cancelled", "pending", "held", "pending", "pending"]
    post(client, f"/api/v1/jobs/{array}/cancel")
    states = [t["state"] for t in client.get(f"/api/v1/jobs?array={array}", headers=auth(ALICE)).json()]
    assert states == ["cancelled"] * 5


def test_a_refusal_names_an_arrays_task_as_its_owner_does(client: AsgiClient, agent: FakeAgent) -> None:
    """The owner acted on `7_1` (the CLI sends the task's job id): the refusal says 7_1, not that id."""
    array = int(submit(client, gpus=0, array="0-1")["id"])  # type: ignore[call-overload]
    cycle(client, agent)
    task = client.get(f"/api/v1/jobs?array={array}", headers=auth(ALICE)).json()[1]
    assert task["id"] != array and task["state"] == "running"

    def refused(path: str) -> str:
        r = client.post(path, headers=auth(ALICE))
        assert r.status_code == 409, r.text
        return str(r.json()["detail"])

    assert refused(f"/api/v1/jobs/{task['id']}/hold?one=true") == (
        f"job {array}_1 is running and cannot be held; cancel it, or requeue it once it ends")
    assert refused(f"/api/v1/jobs/{array}/hold").startswith(f"array {array}'s tasks are running and cannot be held")
    assert refused(f"/api/v1/jobs/{task['id']}/top").startswith(f"job {array}_1 is running;")
    agent.exit(task["id"])
    agent.beat()
    assert refused(f"/api/v1/jobs/{task['id']}/checkpoint").startswith(f"job {array}_1 is completed, not running")
    assert refused(f"/api/v1/jobs/{task['id']}/cancel?one=true") == f"job {array}_1 already ended (completed)"


def test_a_thousand_task_array_is_one_request(client: AsgiClient) -> None:
    submit(client, gpus=0, array="0-999")  # its speed is measured in benchmarks/throughput.py, not here
    assert len(client.get("/api/v1/jobs", headers=auth(ALICE)).json()) == 1000


def test_bad_array_specs_are_refused_naming_what_works(client: AsgiClient) -> None:
    for spec in ("5-1", "0-99%0", "0-99%10001", "a-b", "0-20000", "0-999999,0-999999"):
        r = client.post("/api/v1/jobs", json={"command": ["x"], "array": spec}, headers=auth(ALICE))
        assert r.status_code == 422, spec


def test_ps_and_show_agree_on_jobs_ahead_when_those_ahead_have_left(client: AsgiClient, agent: FakeAgent) -> None:
    submit(client, gpus=4)
    cycle(client, agent)
    ahead = [int(submit(client, gpus=4)["id"]) for _ in range(2)]  # type: ignore[call-overload]
    last = int(submit(client, gpus=4)["id"])  # type: ignore[call-overload]
    tick(client)
    assert str(job(client, last)["reason"]).startswith("2 jobs ahead")
    for j in ahead:
        post(client, f"/api/v1/jobs/{j}/cancel")
    tick(client)  # a wording-only change is written back only now and then
    listed = next(j for j in client.get("/api/v1/jobs", headers=auth(ALICE)).json() if j["id"] == last)
    assert str(listed["reason"]).startswith("next in line")
    assert job(client, last)["reason"] == listed["reason"]


def test_modifying_an_array_changes_its_waiting_tasks_only(client: AsgiClient, agent: FakeAgent) -> None:
    array = int(submit(client, gpus=0, array="0-3%2", name="old")["id"])  # type: ignore[call-overload]
    cycle(client, agent)
    r = client.patch(f"/api/v1/jobs/{array}", json={"name": "new"}, headers=auth(ALICE))
    assert r.status_code == 200, r.text
    tasks = client.get(f"/api/v1/jobs?array={array}", headers=auth(ALICE)).json()
    assert [(t["state"], t["name"]) for t in tasks] == [
        ("running", "old"), ("running", "old"), ("pending", "new"), ("pending", "new")]


def test_reasons_name_an_arrays_task_as_users_do(client: AsgiClient, agent: FakeAgent) -> None:
    """`ps --expand` and `cancel 12_1` name task 1 of array 12 so; a reason waiting on it says `job 12_1`, not
    the task's own job id, which nothing else shows."""
    submit(client, gpus=0)  # so that the array's id and its tasks' job ids differ from their indices
    array = int(submit(client, gpus=4, array="0-1", time_limit_s=600)["id"])  # type: ignore[call-overload]
    cycle(client, agent)
    first, second = client.get(f"/api/v1/jobs?array={array}", headers=auth(ALICE)).json()
    assert first["state"] == "running" and second["state"] == "pending"
    assert second["id"] != array and f"when job {array}_0 ends" in second["reason"], second
    later = submit(client, gpus=4)
    cycle(client, agent)
    assert f"job {array}_1" in str(job(client, later["id"])["reason"]), job(client, later["id"])["reason"]


def test_top_of_one_task_moves_it_before_its_arrays_other_tasks(client: AsgiClient, agent: FakeAgent) -> None:
    blocker = int(submit(client, gpus=4)["id"])  # type: ignore[call-overload]
    cycle(client, agent)
    array = int(submit(client, gpus=4, array="0-2")["id"])  # type: ignore[call-overload]
    tasks = [t["id"] for t in client.get(f"/api/v1/jobs?array={array}", headers=auth(ALICE)).json()]
    post(client, f"/api/v1/jobs/{tasks[2]}/top")
    agent.exit(blocker)
    agent.beat()
    cycle(client, agent)
    assert list(agent.running) == [tasks[2]]
