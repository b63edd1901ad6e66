"""Property: a driver that hands the core whole snapshots (the server: `Incremental.sync`, `cycle`, `applied`,
reusing the objects of what did not change, as its `SnapshotCache` does) gets exactly the decisions a fresh cycle
without any carried state makes, whatever arrives, ends, is cancelled or is preempted between ticks. The carried
state (free GPUs, expected ends, classes) must never believe a GPU is free that a job holds, or the reverse."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from nanum.core import Decisions, Incremental, JobId, Policy, Running, Snapshot, schedule
from tests.core.builders import job, lab, nodes

POLICIES = ("fifo+backfill", "gittins+binpack+backfill+preempt", "las+backfill+preempt", "fairshare+spread+backfill")
STEP = st.tuples(
    st.lists(st.tuples(st.sampled_from([1, 1, 2, 3, 4, 8]), st.sampled_from("ab"), st.sampled_from([None, 600.0])),
             max_size=4),  # arrivals: (GPUs, lab, time limit)
    st.integers(0, 3),  # how many running jobs end
    st.integers(0, 2),  # how many pending jobs are cancelled
    st.booleans(),  # a node goes down for this tick
)


def _decisions(d: Decisions) -> tuple[object, ...]:
    return (sorted((s.job_id, s.placements) for s in d.starts), sorted(p.job_id for p in d.preemptions),
            sorted((p.job_id, p.reason.code, p.estimated_start) for p in d.pending))


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(POLICIES), st.lists(STEP, min_size=1, max_size=12))
def test_syncing_whole_snapshots_decides_as_a_fresh_cycle(policy_text: str, steps: list[tuple]) -> None:
    policy = Policy.parse(policy_text, lend=True)
    cluster = nodes(3, 4) + nodes(1, 8, prefix="big")
    labs = {"a": lab("a", guaranteed=8), "b": lab("b", guaranteed=4)}
    core = Incremental(policy, None, (), labs, explain=True)
    pending: dict[JobId, object] = {}
    running: dict[JobId, Running] = {}
    next_id, now = 1, 0.0
    for arrivals, ends, cancels, node_down in steps:
        now += 60.0
        for gpus, lab_name, limit in arrivals:
            pending[JobId(next_id)] = job(next_id, gpus, lab=lab_name, submit=now, time_limit=limit)
            next_id += 1
        for job_id in sorted(running)[:ends]:
            del running[job_id]
        for job_id in sorted(pending)[:cancels]:
            del pending[job_id]
        shown = cluster if not node_down else cluster[1:]  # a new tuple: the node left
        snap = Snapshot(now=now, nodes=shown, pending=tuple(pending.values()),  # type: ignore[arg-type]
                        running=tuple(running.values()), labs=labs)
        core.sync(snap)
        ours = core.cycle(snap)
        fresh = schedule(snap, policy, None, explain=True)
        assert _decisions(ours) == _decisions(fresh)
        core.applied(snap, ours)
        for start in ours.starts:  # the next snapshot shows them running, as new objects
            started = pending.pop(start.job_id)
            running[start.job_id] = Running(job=started, placements=start.placements,  # type: ignore[arg-type]
                                            start_time=now, expected_end=start.expected_end,
                                            borrowing=start.borrowing, over_reservation=start.over_reservation)
        for victim in ours.preemptions:  # preempted: back in the queue
            run = running.pop(victim.job_id)
            pending[victim.job_id] = run.job
    steady = any(not a[3] and not b[3] for a, b in pairwise(steps))
    assert core.cache.reuses > 0 or not steady  # consecutive ticks on the same nodes carried the state over
