"""`nanum priority`: each pending job's multifactor priority broken into its factors, like Slurm's `sprio`.

The factors and weights are the core's (`nanum.core.priority_factors`, `PRIORITY_WEIGHTS`), computed on the same
snapshot the scheduler reads (decayed usage with the server's half-life, running jobs' time included), and `rank`
is the job's place in the queue under the server's order, whichever order that is.
"""

from __future__ import annotations

import time
from typing import Any

from nanum.core import HistoryPredictor, OrderContext, priority_factors
from nanum.core.ordering import PRIORITY_WEIGHTS
from nanum.server import snapshot
from nanum.server.context import ServerContext


def report(ctx: ServerContext, *, user: str | None = None, lab: str | None = None) -> dict[str, Any]:
    now = time.time()
    settings = ctx.settings
    with ctx.db.read() as s:
        plan = snapshot.build(s, now, settings.node_timeout_s, HistoryPredictor(), None, settings.half_life_s)
    snap = plan.snapshot
    order_ctx = OrderContext(now, snap.labs, snap.users, sum(len(n.gpus) for n in snap.nodes), None, snap.running)
    order = ctx.policy.make_order()
    queue = sorted(snap.pending, key=lambda j: order.sort_key(j, order_ctx))
    rows = []
    for rank, job in enumerate(queue, 1):
        if (user and job.user != user) or (lab and job.lab != lab):
            continue
        factors = priority_factors(job, order_ctx)
        rows.append(
            {
                "job_id": job.id,
                "name": job.name,
                "user": job.user,
                "lab": job.lab,
                "rank": rank,
                "priority": round(sum(PRIORITY_WEIGHTS[k] * v for k, v in factors.items()), 1),
                "factors": {k: round(v, 4) for k, v in factors.items()},
                "user_fairshare": round(order_ctx.user_factor(job.user), 4),
            }
        )
    return {"policy": ctx.policy.label, "weights": dict(PRIORITY_WEIGHTS), "jobs": rows}
