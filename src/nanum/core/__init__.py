"""nanum's scheduling core: pure policy, data in and decisions out. No I/O, no clock, no randomness.

`schedule(snapshot, policy, predictor)` runs one cycle; the server and the simulator both drive it.
"""

from nanum.core.cache import CycleCache
from nanum.core.decision import Code, Decisions, Pending, Preempt, Reason, Start
from nanum.core.fairshare import decay
from nanum.core.incremental import Incremental
from nanum.core.model import (
    Gpu,
    Job,
    JobId,
    JobKind,
    Lab,
    Limits,
    Node,
    NodeState,
    Placement,
    Running,
    Snapshot,
    User,
)
from nanum.core.ordering import ORDERS, OrderContext, priority_factors
from nanum.core.placement import PLACEMENTS
from nanum.core.policy import Policy, PolicyError
from nanum.core.predict import HistoryPredictor, Prediction, Predictor, expected_end, expected_runtime, planned_end
from nanum.core.quota import impossible
from nanum.core.scheduler import schedule

__all__ = [
    "ORDERS",
    "PLACEMENTS",
    "Code",
    "CycleCache",
    "Decisions",
    "Gpu",
    "HistoryPredictor",
    "Incremental",
    "Job",
    "JobId",
    "JobKind",
    "Lab",
    "Limits",
    "Node",
    "NodeState",
    "OrderContext",
    "Pending",
    "Placement",
    "Policy",
    "PolicyError",
    "Prediction",
    "Predictor",
    "Preempt",
    "Reason",
    "Running",
    "Snapshot",
    "Start",
    "User",
    "decay",
    "expected_end",
    "expected_runtime",
    "impossible",
    "planned_end",
    "priority_factors",
    "schedule",
]
