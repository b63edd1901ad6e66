"""Limits as people read them: budget reasons name the figures readably (small budgets included), and a job
larger than its lab's or user's max_gpus is refused as impossible."""

from __future__ import annotations

import pytest

from nanum.core import Code, Lab, Limits, Policy, User, impossible, schedule
from tests.core.builders import job, nodes, snap


@pytest.mark.parametrize(("budget", "used", "text"), [
    pytest.param(1000.0, 1000.5, "has used its 1,000 GPU-hours for November (1,000.5 used)", id="large"),
    pytest.param(0.01, 0.0111, "has used its 0.01 GPU-hours for November (0.0111 used)", id="small"),
    pytest.param(5.0, 5.0, "has used its 5 GPU-hours for November (5 used)", id="exact"),
])
def test_budget_reason_figures(budget: float, used: float, text: str) -> None:
    spent = Lab(name="nlp", limits=Limits(monthly_gpu_hours=budget), used_gpu_hours=used)
    d = schedule(snap(nodes(1), (job(1, lab="nlp"),), labs=(spent,), month="November"), Policy())
    (pending,) = d.pending
    assert pending.reason.code is Code.BUDGET and pending.reason.message == f"lab nlp {text}"


@pytest.mark.parametrize(("users", "expected"), [
    pytest.param({"bob": User(name="bob", limits=Limits(max_gpus=1))}, "needs 2 GPUs; user bob has max_gpus 1",
                 id="user-cap"),
    pytest.param({"bob": User(name="bob", limits=Limits(max_gpus=2))}, None, id="within"),
    pytest.param(None, None, id="no-users"),
])
def test_a_job_larger_than_its_users_max_gpus_is_impossible(users: dict[str, User] | None,
                                                             expected: str | None) -> None:
    reason = impossible(job(1, gpus=2, user="bob"), nodes(1), {}, True, users)
    assert (reason.message if reason else None) == expected
