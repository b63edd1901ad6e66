"""`nanum priority`: each pending job's multifactor priority broken into its factors, like Slurm's `sprio`.

The factors and weights are the core's (`nanum.core.priority_factors`, `PRIORITY_WEIGHTS`), computed on the same
snapshot the scheduler reads (decayed usage with the server's half-life, running jobs' time included), and `rank`
is the job's place in its partition's queue: the place its reason gives ("N jobs ahead" is rank N+1, "next in
line" rank 1) as of the last scheduling tick; for a job submitted since, the place under the server's order (a
higher `tier`, set by admins, first in every order) with a user's priorities arranged among their own jobs of a
tier as the scheduler does (`by_user_priority` under `gittins`). Each row shows the job's tier.
Rows come by rank, then in that order.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

from nanum.core import HistoryPredictor, Job, OrderContext, priority_factors
from nanum.core.ordering import PRIORITY_WEIGHTS, ordered
from nanum.core.scheduler import partition_of
from nanum.server import snapshot
from nanum.server.context import ServerContext


class _Ordered(NamedTuple):
    """The pending jobs in the server's order, what the order read, and the labs that own nodes."""

    queue: list[Job]
    order_ctx: OrderContext
    owners: set[str]


def _ordered(ctx: ServerContext) -> _Ordered:
    now = ctx.clock()
    settings = ctx.settings
    with ctx.db.read() as s:
        plan = snapshot.build(s, now, settings.node_timeout_s, HistoryPredictor(), None, settings.half_life_s,
                              ctx.last_seen.since)
    snap = plan.snapshot
    order_ctx = OrderContext(now, snap.labs, snap.users, sum(len(n.gpus) for n in snap.nodes), None, snap.running)
    queue = ordered(snap.pending, ctx.policy.make_order(), order_ctx)
    return _Ordered(queue, order_ctx, {n.owner for n in snap.nodes if n.owner is not None})


def report(ctx: ServerContext, *, user: str | None = None, lab: str | None = None) -> dict[str, Any]:
    """The rows of the pending jobs of `user` and `lab` (all where None). The ordered queue is read once for the
    requests of the next second on a large cluster (`Caches.shared`: at 1,000 nodes it takes about 0.3 s of CPU,
    and people run this under `watch`)."""
    queue, order_ctx, owners = ctx.caches.shared("priority", lambda: _ordered(ctx))
    places: Counter[str | None] = Counter()
    rows: list[tuple[int, dict[str, Any]]] = []
    for job in queue:
        part = partition_of(job.lab, ctx.policy.lend, owners)
        places[part] += 1
        rank = ctx.places.get(job.id, places[part])
        if (user and job.user != user) or (lab and job.lab != lab):
            continue
        factors = priority_factors(job, order_ctx)
        rows.append((rank, {
            "job_id": job.id,
            "job_ref": job.ref,
            "name": job.name,
            "user": job.user,
            "lab": job.lab,
            "rank": rank,
            "tier": job.tier,
            "priority": round(sum(PRIORITY_WEIGHTS[k] * v for k, v in factors.items()), 1),
            "factors": {k: round(v, 4) for k, v in factors.items()},
            "user_fairshare": round(order_ctx.user_factor(job.user), 4),
        }))
    rows.sort(key=lambda row: row[0])  # stable: the order above among equal ranks
    return {"policy": ctx.policy.label, "weights": dict(PRIORITY_WEIGHTS), "jobs": [row for _, row in rows]}
