"""Property: for any workload, the core's skip rule (`Incremental.due`, partitions left out, checkpoints only for
cycles that preempt) changes no decision. Random traces, clusters and policies are replayed twice — once skipping,
once with a cycle at every change shown every pending job and checkpoint — and every run of every job must match.
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from nanum.core import Policy
from nanum.sim import SimOptions, Simulation, TraceJob
from nanum.sim.cluster import cluster_from_dict

POLICIES = ("gittins+binpack+backfill+preempt", "las+backfill+preempt", "fifo+backfill", "fifo+nobackfill",
            "shortest+backfill", "las+nobackfill+preempt", "fairshare+spread+backfill")
HOUR = 3600


@st.composite
def traces(draw: st.DrawFn) -> list[TraceJob]:
    n = draw(st.integers(5, 45))
    t, jobs = 0, []
    for i in range(n):
        t += draw(st.sampled_from([0, 10, 120, 900, 3 * HOUR]))
        jobs.append(TraceJob(
            job_id=str(i), submit_time=t, num_gpus=draw(st.sampled_from([1, 1, 2, 3, 4, 8])),
            duration=draw(st.sampled_from([30, 600, 1800, 2 * HOUR, 5 * HOUR, 12 * HOUR])),
            lab=draw(st.sampled_from("abc")), user=f"u{draw(st.integers(1, 3))}", name=f"n{draw(st.integers(1, 2))}",
            time_limit=draw(st.sampled_from([None, None, 3 * HOUR]))))
    return jobs


@st.composite
def clusters(draw: st.DrawFn) -> dict[str, object]:
    b_gpus = draw(st.sampled_from([4, 8]))
    groups: list[dict[str, object]] = [{"lab": "a", "count": draw(st.integers(1, 2)), "gpus": 4},
                                       {"lab": "b", "count": draw(st.integers(1, 2)), "gpus": b_gpus}]
    if draw(st.booleans()):
        groups.append({"count": 1, "gpus": 4})  # shared: partitions meet there
    return {"lend": draw(st.booleans()), "reclaim": draw(st.booleans()), "nodes": groups}


def _replay(trace: list[TraceJob], cluster: dict[str, object], policy: str, restart: float, skip: bool) -> list[tuple]:
    spec = cluster_from_dict(cluster)
    sim = Simulation(trace, spec, Policy.parse(policy, lend=spec.lend, reclaim=spec.reclaim),
                     SimOptions(restart_cost=restart, checkpoint_interval=900))
    sim.core.skip = skip
    result = sim.run()
    return [(s.job, s.node, s.gpus, s.start, s.end) for s in result.segments]


def _jobs(*rows: tuple[int, int, int, str]) -> list[TraceJob]:
    """Trace jobs of one user from (submitted, GPUs, duration, lab)."""
    return [TraceJob(job_id=str(i), submit_time=t, num_gpus=g, duration=d, lab=lab, user="u1", name="n1")
            for i, (t, g, d, lab) in enumerate(rows)]


#: Found by this property: which of its own lab's jobs a new job would preempt follows their checkpoints, and when
#: it would still borrow after those stopped it preempts only borrowers (here: none). At 25,200 s, ranked by their
#: starts (no checkpoint seen), job 23 would stop job 6 alone and still borrow; ranked by their checkpoints, jobs 31
#: and 6, and it borrows no more: it preempts them.
CHECKPOINTS_DECIDE = _jobs(
    *[(0, 1, 30, "a")] * 6, (0, 3, 18000, "a"), (0, 1, 18000, "b"), (0, 3, 30, "a"), (0, 1, 30, "a"),
    (0, 1, 18000, "a"), (10, 2, 18000, "b"), (10, 8, 30, "a"), *[(10, 1, 30, "a")] * 5, (10, 2, 30, "a"),
    (10810, 4, 600, "b"), (10930, 4, 18000, "b"), (10930, 1, 30, "a"), (10930, 1, 30, "a"), (10930, 4, 30, "a"),
    (10930, 1, 18000, "b"), *[(10930, 1, 30, "a")] * 6, (10930, 1, 18000, "a"), (10930, 1, 18000, "b"))


@settings(max_examples=60, deadline=None)
@given(traces(), clusters(), st.sampled_from(POLICIES), st.sampled_from([0.0, 30.0]))
@example(CHECKPOINTS_DECIDE, {"lend": True, "reclaim": False, "nodes": [{"lab": "a", "count": 1, "gpus": 4},
                                                                        {"lab": "b", "count": 1, "gpus": 8}]},
         "las+nobackfill+preempt", 0.0)
def test_skipping_never_changes_a_decision(trace: list[TraceJob], cluster: dict[str, object], policy: str,
                                           restart: float) -> None:
    assert _replay(trace, cluster, policy, restart, skip=True) == _replay(trace, cluster, policy, restart, skip=False)
