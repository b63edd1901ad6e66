"""A job's predicted run time and its basis in the job view, as the scheduler's predictor learned them."""

from __future__ import annotations

from nanum.cli.views import show_lines
from nanum.server.context import ServerContext
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, job, submit, tick
from tests.server.fakeagent import FakeAgent
from tests.server.test_web import get, login


def _finish(client: AsgiClient, agent: FakeAgent, count: int) -> None:
    for _ in range(count):
        done = submit(client, ALICE, name="train", gpus=1, time_limit_s=3600)
        tick(client)
        agent.beat()
        agent.exit(int(done["id"]))  # type: ignore[call-overload]
        agent.beat()


def test_a_new_job_is_predicted_from_finished_jobs_of_its_user_and_name(client: AsgiClient, agent: FakeAgent) -> None:
    _finish(client, agent, 3)
    queued = submit(client, ALICE, name="train", gpus=2, time_limit_s=7200)
    tick(client)
    shown = job(client, queued["id"])
    assert shown["state"] == "running"
    assert shown["prediction_basis"] == "mean of the last 3 finished jobs of alice named train"
    assert isinstance(shown["predicted_runtime_s"], float) and 0.0 <= shown["predicted_runtime_s"] < 60.0
    line = dict(show_lines(shown))["prediction"]
    assert line.endswith("run time (mean of the last 3 finished jobs of alice named train)")
    listed = client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {ALICE}"}).json()
    assert [j["prediction_basis"] for j in listed if j["id"] == queued["id"]] == [shown["prediction_basis"]]


def test_with_no_history_the_job_view_says_so(client: AsgiClient, agent: FakeAgent) -> None:
    queued = submit(client, BOB, name="sweep", gpus=4, time_limit_s=14400)
    assert job(client, queued["id"])["prediction_basis"] is None  # not yet seen by a tick
    waiting = submit(client, BOB, name="sweep", gpus=4, time_limit_s=14400)
    tick(client)
    shown = job(client, queued["id"])
    assert shown["predicted_runtime_s"] is None and shown["prediction_basis"] == "no similar finished job"
    assert job(client, waiting["id"])["state"] == "pending"
    assert job(client, waiting["id"])["prediction_basis"] == "no similar finished job"
    assert dict(show_lines(shown))["prediction"] == "none (no similar finished job; its time limit 4:00:00 is used)"


def test_ended_jobs_carry_no_prediction(client: AsgiClient, agent: FakeAgent) -> None:
    _finish(client, agent, 1)
    ended = client.get("/api/v1/jobs", params={"all": "true"}, headers={"Authorization": f"Bearer {ALICE}"}).json()
    assert [(j["state"], j["predicted_runtime_s"], j["prediction_basis"]) for j in ended] == [("completed", None, None)]


def test_a_job_waiting_for_a_dependency_is_predicted_too(client: AsgiClient, agent: FakeAgent) -> None:
    _finish(client, agent, 2)
    first = submit(client, ALICE, name="prep", gpus=1, time_limit_s=3600)
    after = submit(client, ALICE, name="train", gpus=1, time_limit_s=3600, after_ok=[str(first["id"])])
    tick(client)
    shown = job(client, after["id"])
    assert shown["state"] == "pending" and shown["reason"] is not None
    assert shown["prediction_basis"] == "mean of the last 2 finished jobs of alice named train"
    assert isinstance(shown["predicted_runtime_s"], float)


def test_the_job_page_shows_the_prediction(client: AsgiClient, agent: FakeAgent) -> None:
    _finish(client, agent, 2)
    queued = submit(client, ALICE, name="train", gpus=1, time_limit_s=3600)
    tick(client)
    cookies = login(client, ALICE)
    page = get(client, f"/jobs/{queued['id']}", cookies).text
    assert "Predicted" in page and "(mean of the last 2 finished jobs of alice named train)" in page
    live = get(client, f"/ui/jobs/{queued['id']}.json", cookies).json()
    assert live["prediction"].endswith("run time (mean of the last 2 finished jobs of alice named train)")


def test_a_tick_keeps_every_pending_and_running_jobs_prediction_and_only_theirs(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    """Ticks refresh only the jobs written since the one before; what they publish is what a full pass gives."""
    scheduler = client.app.state.scheduler
    ids = [int(submit(client, ALICE, name=f"exp{i % 2}", gpus=2)["id"]) for i in range(4)]  # 2 run, 2 wait
    for step in range(4):
        tick(client)
        agent.beat()
        if step == 0:
            ids.append(int(submit(client, BOB, name="other", gpus=1)["id"]))
        if step == 1:
            client.post(f"/api/v1/jobs/{ids[2]}/cancel", headers={"Authorization": f"Bearer {ALICE}"})
        if step == 2:
            agent.exit(ids[0])
        active = {j["id"] for j in client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {ADMIN}"},
                                              params={"all": "true"}).json() if j["state"] in ("pending", "running")}
        tick(client)
        assert ctx.predictions.keys() == active
        kept = dict(ctx.predictions)
        scheduler._published = (None, None, None)  # the next tick makes them all afresh
        tick(client)
        assert ctx.predictions == kept
