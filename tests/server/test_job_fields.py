"""A job's fields are declared once (`nanum.jobfields`), and the API follows the declaration: each bound refuses
with the field's name, a submitted field is stored and shown back, a row older than a column shows the declared
default, and a change to a waiting job is checked with the submission's bounds."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update

from nanum.jobfields import Job, JobChanges, JobRequest, SubmitFields, spec
from nanum.server.context import ServerContext
from nanum.server.job_schemas import JobPatch
from nanum.server.views import _COMPUTED, _SHOWN
from nanum.store import JobRow, table
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ALICE, auth, job, submit

#: Submitted fields `Job` shows under another name or shape (a lab's name, the dependencies as pairs, an
#: array's id, a hold as its state), or keeps to the server (the request id).
NOT_SHOWN_AS_SENT = {"lab", "array", "after_ok", "after_failed", "after_any", "client_request_id", "hold"}


def _bounded() -> list[Any]:
    """(field, a value just past one of its bounds, the sentence the API says) for every bound declared."""
    cases = []
    for name in SubmitFields.__annotations__:
        found = spec(SubmitFields, name)
        if found.le is not None:
            cases.append(pytest.param(name, found.le + 1, f"less than or equal to {found.le}", id=f"{name}-le"))
        if found.ge is not None:
            cases.append(pytest.param(name, found.ge - 1, f"greater than or equal to {found.ge}", id=f"{name}-ge"))
        if found.gt is not None:
            cases.append(pytest.param(name, found.gt, f"greater than {found.gt}", id=f"{name}-gt"))
    return cases


@pytest.mark.parametrize(("field", "value", "said"), _bounded())
def test_every_declared_bound_is_refused_naming_the_field(client: AsgiClient, field: str, value: float,
                                                          said: str) -> None:
    r = client.post("/api/v1/jobs", json={"command": ["python", "t.py"], field: value}, headers=auth(ALICE))
    assert r.status_code == 422 and r.json() == {"detail": f"invalid {field}: input should be {said}"}


def test_a_change_to_a_waiting_job_is_bounded_as_a_submission_is(client: AsgiClient) -> None:
    assert set(JobPatch.model_fields) == set(JobChanges.__annotations__)  # the SDK's type names what the API takes
    waiting = submit(client)
    bounded = [name for name in JobChanges.__annotations__ if spec(JobRequest, name).le is not None]
    assert {"gpus", "nodes", "cpus", "memory_mb", "gpu_memory_mb", "priority", "tier", "time_limit_s"} <= set(bounded)
    for field in bounded:
        too_many = spec(JobRequest, field).le + 1  # type: ignore[operator]
        sent = client.post("/api/v1/jobs", json={"command": ["x"], field: too_many}, headers=auth(ALICE))
        changed = client.patch(f"/api/v1/jobs/{waiting['id']}", json={field: too_many}, headers=auth(ALICE))
        assert changed.status_code == sent.status_code == 422
        assert changed.json() == sent.json()


def test_every_field_submitted_is_shown_back_as_sent(client: AsgiClient) -> None:
    body: dict[str, Any] = {"command": ["python", "t.py"], "name": "run", "gpus": 0, "nodes": 2, "gpu_model": "A100",
                            "gpu_memory_mb": 1024, "constraints": ["net=ib"], "torchrun": True, "cpus": 2,
                            "memory_mb": 512, "time_limit_s": 60.0, "priority": 7, "workdir": "/srv", "env": {"A": "1"},
                            "kind": "batch", "preemptible": False, "requeue": False, "keep_if_unmet": True,
                            "retries": 3}
    shown = submit(client, **body)
    assert {k: shown[k] for k in body} == body
    sent = set(JobRequest.__annotations__) - NOT_SHOWN_AS_SENT
    assert sent <= set(Job.__annotations__), "show these fields in nanum.jobfields.Job, or say why they are not"


def test_a_row_older_than_a_column_shows_the_declared_default(client: AsgiClient, ctx: ServerContext) -> None:
    made = submit(client)
    columns = table(JobRow).columns
    defaulted = {k: spec(Job, k).default for k in _SHOWN if k in columns and columns[k].nullable
                 and k not in _COMPUTED and spec(Job, k).default not in (None, ...)}
    assert defaulted
    with ctx.db.write() as s:
        s.execute(update(JobRow).where(JobRow.id == made["id"]).values(dict.fromkeys(defaulted)))
    shown = job(client, made["id"])
    assert {k: shown[k] for k in defaulted} == defaulted
    assert list(shown)[:len(_SHOWN)] == list(_SHOWN)


def test_every_key_a_body_shows_comes_from_a_column_a_computation_or_a_default() -> None:
    columns = set(table(JobRow).columns.keys())
    unsourced = [k for k in _SHOWN if k not in columns and k not in _COMPUTED and spec(Job, k).default is ...]
    assert unsourced == [], "give these a default in nanum.jobfields.Job, or compute them in views.job_out"


def test_the_command_is_checked_first_as_declared(client: AsgiClient) -> None:
    r = client.post("/api/v1/jobs", json={"gpus": -1, "cpus": -1}, headers=auth(ALICE))
    assert r.json() == {"detail": "invalid command: field required"}
    r = client.post("/api/v1/jobs", json={"command": ["x"], "cpus": -1, "gpus": -1}, headers=auth(ALICE))
    assert r.json() == {"detail": "invalid gpus: input should be greater than or equal to 0"}
