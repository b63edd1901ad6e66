"""A budget reason names the figures readably, small budgets included."""

from __future__ import annotations

import pytest

from nanum.core import Code, Lab, Limits, Policy, schedule
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
