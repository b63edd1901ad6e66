"""The scheduler's snapshot, kept from tick to tick and brought up to date from the job rows written since the last
one (`nanum.server.snapshot.SnapshotCache`), must be the snapshot a fresh read of the whole cluster gives: the same
pending jobs in the same order, the same runs on the same GPUs, the same nodes; whatever users, agents and ticks did
in between."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanum.server import snapshot
from nanum.server.context import ServerContext
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, auth, submit
from tests.server.fakeagent import FakeAgent

STEPS = ("submit", "submit", "submit", "after", "tick", "tick", "beat", "exit", "fail", "cancel", "requeue", "hold",
         "release", "priority")


def _view(plan: snapshot.Plan) -> dict[str, Any]:
    snap = plan.snapshot
    return {
        "pending": list(snap.pending),
        "running": {r.job.id: (r.job, r.placements, r.start_time, r.borrowing, r.last_checkpoint,
                               r.over_reservation) for r in snap.running},
        "nodes": snap.nodes,
        "labs": {name: (lab.used_gpu_hours, lab.decayed_usage) for name, lab in snap.labs.items()},
        "waiting": list(plan.waiting),
        "shown": {job_id: tuple(row) for job_id, row in plan.pending_rows.items()},
    }


def _same(ctx: ServerContext, client: AsgiClient) -> None:
    sched = client.app.state.scheduler
    now, st_ = time.time(), ctx.settings
    with ctx.db.read() as s:
        if ctx.db.is_postgres:
            s.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        kept = snapshot.build(s, now, st_.node_timeout_s, sched.predictor, sched._cache, st_.half_life_s)
        fresh = snapshot.build(s, now, st_.node_timeout_s, sched.predictor, None, st_.half_life_s)
    a, b = _view(kept), _view(fresh)
    for key in a:
        if key == "labs":  # the same runs summed in another order
            assert a[key].keys() == b[key].keys()
            for name, numbers in a[key].items():
                assert numbers == pytest.approx(b[key][name]), name
        else:
            assert a[key] == b[key], key


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(STEPS), st.integers(0, 50), st.integers(1, 3)), min_size=1,
                      max_size=40))
def test_the_snapshot_kept_between_ticks_is_the_one_a_fresh_read_gives(
        client: AsgiClient, ctx: ServerContext, agent: FakeAgent, steps: list[tuple[str, int, int]]) -> None:
    def post(url: str, token: str = ALICE, **body: object) -> None:
        client.post(url, json=body or None, headers=auth(token))  # refused ones (a state that forbids it) too

    ids: list[int] = []
    for step, pick, gpus in steps:
        running = sorted(agent.running)
        mine = running[pick % len(running)] if running else None
        waiting = ids[pick % len(ids)] if ids else None  # any job of this example; most are pending
        if step == "submit":
            ids.append(int(submit(client, gpus=gpus, name=f"kind{pick % 3}")["id"]))  # type: ignore[call-overload]
        elif step == "after" and waiting is not None:  # waits for another job: held back, not the core's to run
            r = client.post("/api/v1/jobs", json={"command": ["true"], "workdir": "/tmp", "gpus": gpus,
                                                  "after_ok": [str(waiting)]}, headers=auth(ALICE))
            if r.status_code == 201:  # else refused: that job has ended without success
                ids.append(r.json()["id"])
        elif step == "tick":
            client.app.state.scheduler.tick()
        elif step == "beat":
            agent.beat()
        elif step in ("exit", "fail") and mine is not None:
            agent.exit(mine, code=0 if step == "exit" else 1)
            agent.beat()
        elif step == "cancel" and (mine or waiting) is not None:
            post(f"/api/v1/jobs/{mine if pick % 2 and mine else waiting}/cancel")
        elif step == "requeue" and mine is not None:
            post(f"/api/v1/jobs/{mine}/requeue", ADMIN)
            agent.beat()
        elif step == "hold" and waiting is not None:
            post(f"/api/v1/jobs/{waiting}/hold")
        elif step == "release":
            for j in ids:
                post(f"/api/v1/jobs/{j}/release")
        elif step == "priority" and waiting is not None:
            client.patch(f"/api/v1/jobs/{waiting}", json={"priority": pick % 5}, headers=auth(ADMIN))
        _same(ctx, client)
