"""Property tests: the invariants of DESIGN.md hold for any cluster, queue and policy hypothesis can build."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from nanum.core import (
    ORDERS,
    PLACEMENTS,
    Code,
    Decisions,
    Gpu,
    Job,
    JobId,
    Lab,
    Limits,
    Node,
    Placement,
    Policy,
    Running,
    Snapshot,
    schedule,
)

NOW = 1000.0
policies = st.builds(
    Policy,
    order=st.sampled_from(sorted(ORDERS)),
    placement=st.sampled_from(sorted(PLACEMENTS)),
    backfill=st.sampled_from(("easy", "none")),
    lend=st.booleans(),
    estimate_depth=st.integers(1, 3),
)


@st.composite
def clusters(draw: st.DrawFn, *, extras: bool = True, labs: tuple[str, ...] = ("a", "b", "c")) -> Snapshot:
    """A random cluster with some GPUs already held by running jobs and a random pending queue."""
    node_list = []
    for i in range(draw(st.integers(1, 6))):
        size = draw(st.sampled_from([1, 2, 4, 8]))
        model = draw(st.sampled_from(["A100", "H100"]))
        node_list.append(Node(
            name=f"n{i}", gpus=tuple(Gpu(g, model, 81920, g // 4) for g in range(size)),
            cpus=draw(st.sampled_from([0, 16, 64])) if extras else 0,
            memory_mb=draw(st.sampled_from([0, 65536])) if extras else 0,
            owner=draw(st.sampled_from([None, *labs])),
        ))
    free = {n.name: [g.index for g in n.gpus] for n in node_list}
    cpus = {n.name: n.cpus for n in node_list}
    run_list, next_id = [], 1
    for _ in range(draw(st.integers(0, 8))):
        n = draw(st.sampled_from(node_list))
        want = draw(st.integers(1, 4))
        c = draw(st.sampled_from([0, 4])) if extras and n.cpus else 0
        if len(free[n.name]) < want or (cpus[n.name] < c and n.cpus):
            continue
        taken, free[n.name] = tuple(free[n.name][:want]), free[n.name][want:]
        cpus[n.name] -= c
        job = Job(id=JobId(next_id), user=draw(st.sampled_from("xyz")), lab=draw(st.sampled_from(labs)),
                  gpus=want, cpus=c, submit_time=0.0, time_limit=draw(st.sampled_from([None, 500.0, 2000.0])))
        start = draw(st.floats(0, NOW))
        end = start + job.time_limit if job.time_limit else None
        run_list.append(Running(job=job, placements=(Placement(n.name, taken),), start_time=start,
                                expected_end=None if end is None else max(end, NOW + 1),
                                borrowing=draw(st.booleans()), over_reservation=draw(st.booleans())))
        next_id += 1
    pending = []
    for _ in range(draw(st.integers(0, 12))):
        pending.append(Job(
            id=JobId(next_id), user=draw(st.sampled_from("xyz")), lab=draw(st.sampled_from(labs)),
            gpus=draw(st.integers(0, 8)), nodes=draw(st.sampled_from([1, 1, 1, 2])),
            gpu_model=draw(st.sampled_from([None, None, "A100", "H100"])),
            cpus=draw(st.sampled_from([0, 8, 32])) if extras else 0,
            memory_mb=draw(st.sampled_from([0, 32768])) if extras else 0,
            time_limit=draw(st.sampled_from([None, 100.0, 1000.0, 5000.0])),
            priority=draw(st.integers(0, 100)), submit_time=draw(st.floats(0, NOW)),
            preemptible=draw(st.booleans()),
        ))
        next_id += 1
    lab_map = {
        name: Lab(name=name, guaranteed_gpus=draw(st.sampled_from([None, 0, 2, 8])),
                  limits=Limits(max_gpus=draw(st.sampled_from([None, 4, 16])),
                                max_running_jobs=draw(st.sampled_from([None, 2, 5]))),
                  decayed_usage=draw(st.floats(0, 1e6)))
        for name in labs
    }
    return Snapshot(now=NOW, nodes=tuple(node_list), pending=tuple(pending), running=tuple(run_list), labs=lab_map)


def holdings(snapshot: Snapshot, d: Decisions) -> list[tuple[str, int, int]]:
    """(node, gpu, job) for every GPU held after the decisions apply (victims still hold theirs until they stop)."""
    jobs = {j.id: j for j in snapshot.pending}
    held = [(p.node, g, r.job.id) for r in snapshot.running for p in r.placements for g in p.gpus]
    held += [(p.node, g, s.job_id) for s in d.starts for p in s.placements for g in p.gpus]
    assert all(s.job_id in jobs for s in d.starts)
    return held


@settings(max_examples=300, deadline=None)
@given(clusters(), policies)
def test_no_gpu_is_ever_held_by_two_jobs(snapshot: Snapshot, policy: Policy) -> None:
    d = schedule(snapshot, policy)
    held = holdings(snapshot, d)
    twice = [k for k, c in Counter((n, g) for n, g, _ in held).items() if c > 1]
    assert not twice, [h for h in held if (h[0], h[1]) in twice]
    nodes = {n.name: n for n in snapshot.nodes}
    for node, gpu, _ in held:
        assert gpu in {g.index for g in nodes[node].gpus}


@settings(max_examples=300, deadline=None)
@given(clusters(), policies)
def test_gangs_are_whole_and_node_cpus_and_memory_never_exceeded(snapshot: Snapshot, policy: Policy) -> None:
    d = schedule(snapshot, policy)
    jobs = {j.id: j for j in snapshot.pending} | {r.job.id: r.job for r in snapshot.running}
    cpu, mem = Counter[str](), Counter[str]()
    for s in d.starts:
        job = jobs[s.job_id]
        assert len(s.placements) == job.nodes
        assert len({p.node for p in s.placements}) == job.nodes
        assert all(len(p.gpus) == job.gpus for p in s.placements)
        assert job.gpu_model is None or all(
            n.gpu_model == job.gpu_model for n in snapshot.nodes if n.name in {p.node for p in s.placements})
    allocations = [(r.job.id, r.placements) for r in snapshot.running] + [(s.job_id, s.placements) for s in d.starts]
    for jid, where in allocations:
        for p in where:
            cpu[p.node] += jobs[jid].cpus
            mem[p.node] += jobs[jid].memory_mb
    for n in snapshot.nodes:
        assert not n.cpus or cpu[n.name] <= n.cpus
        assert not n.memory_mb or mem[n.name] <= n.memory_mb


@settings(max_examples=300, deadline=None)
@given(clusters(), policies)
def test_no_start_breaks_a_lab_limit(snapshot: Snapshot, policy: Policy) -> None:
    d = schedule(snapshot, policy)
    jobs = {j.id: j for j in snapshot.pending}
    gpus, count = Counter[str](), Counter[str]()
    for r in snapshot.running:
        gpus[r.job.lab] += r.job.total_gpus
        count[r.job.lab] += 1
    before = (Counter(gpus), Counter(count))
    for s in d.starts:
        gpus[jobs[s.job_id].lab] += jobs[s.job_id].total_gpus
        count[jobs[s.job_id].lab] += 1
    for name, lab in snapshot.labs.items():
        started = any(jobs[s.job_id].lab == name for s in d.starts)
        if started and lab.limits.max_gpus is not None:
            assert gpus[name] <= max(lab.limits.max_gpus, before[0][name])
        if started and lab.limits.max_running_jobs is not None:
            assert count[name] <= max(lab.limits.max_running_jobs, before[1][name])
    for s in d.starts:  # borrowing is only ever done by jobs that may be preempted
        assert not s.borrowing or jobs[s.job_id].preemptible


@settings(max_examples=200, deadline=None)
@given(clusters(), policies, st.randoms(use_true_random=False))
def test_same_input_same_decisions_whatever_the_input_order(
    snapshot: Snapshot, policy: Policy, rnd: random.Random
) -> None:
    pending, runs = list(snapshot.pending), list(snapshot.running)
    rnd.shuffle(pending)
    rnd.shuffle(runs)
    shuffled = replace(snapshot, pending=tuple(pending), running=tuple(runs))
    assert schedule(snapshot, policy) == schedule(shuffled, policy)


@settings(max_examples=300, deadline=None)
@given(clusters(extras=False), st.sampled_from(sorted(ORDERS)), st.sampled_from(sorted(PLACEMENTS)))
def test_backfill_never_delays_the_reservation_when_run_times_are_exact(
    snapshot: Snapshot, order: str, placement: str
) -> None:
    # Exact run times: every running job has a known end, every pending job runs exactly its time limit.
    runs = tuple(replace(r, expected_end=r.expected_end or NOW + 300.0, borrowing=False) for r in snapshot.running)
    pending = tuple(replace(j, time_limit=j.time_limit or 700.0) for j in snapshot.pending)
    snap = replace(snapshot, running=runs, pending=pending, labs={})
    policy = Policy(order=order, placement=placement, backfill="easy")
    d = schedule(snap, policy)
    heads = [p for p in d.pending if p.reason.code is Code.RESERVED]
    jobs = {j.id: j for j in pending}
    for head in heads:
        t = head.estimated_start
        assert t is not None
        still = tuple(r for r in runs if r.expected_end is not None and r.expected_end > t)
        for s in d.starts:
            job = jobs[s.job_id]
            if NOW + (job.time_limit or 0) > t:
                end = NOW + (job.time_limit or 0)
                still += (Running(job=job, placements=s.placements, start_time=NOW, expected_end=end),)
        later = schedule(replace(snap, now=t, running=still, pending=(jobs[head.job_id],)), policy)
        assert [s.job_id for s in later.starts] == [head.job_id], later.pending


@settings(max_examples=300, deadline=None)
@given(clusters(extras=False), st.sampled_from(["las", "gittins"]), st.sampled_from(sorted(PLACEMENTS)))
def test_with_preemption_a_reservation_is_never_delayed_by_a_job_started_over_it(
    snapshot: Snapshot, order: str, placement: str
) -> None:
    # As above, but with `+preempt` a job that would delay the reservation may start on its GPUs: at the reserved
    # time the head then starts, or takes its GPUs back from such jobs (and nothing else).
    runs = tuple(replace(r, expected_end=r.expected_end or NOW + 300.0, borrowing=False, over_reservation=False)
                 for r in snapshot.running)
    pending = tuple(replace(j, time_limit=j.time_limit or 700.0) for j in snapshot.pending)
    snap = replace(snapshot, running=runs, pending=pending, labs={})
    policy = Policy(order=order, placement=placement, backfill="easy", preempt=True)
    d = schedule(snap, policy)
    jobs = {j.id: j for j in pending}
    for head in (p for p in d.pending if p.reason.code is Code.RESERVED):
        t = head.estimated_start
        assert t is not None
        still = tuple(r for r in runs if r.expected_end is not None and r.expected_end > t)
        for s in d.starts:
            job = jobs[s.job_id]
            end = NOW + (job.time_limit or 0)
            if end > t:
                still += (Running(job=job, placements=s.placements, start_time=NOW, expected_end=end,
                                  over_reservation=s.over_reservation),)
        later = schedule(replace(snap, now=t, running=still, pending=(jobs[head.job_id],)), policy)
        if later.starts:
            assert [s.job_id for s in later.starts] == [head.job_id]
            continue
        assert later.pending_by_id()[head.job_id].reason.code is Code.PREEMPTING, later.pending
        over = {r.job.id for r in still if r.over_reservation}
        assert {p.job_id for p in later.preemptions} <= over


@settings(max_examples=300, deadline=None)
@given(clusters(labs=("owner", "guest")), st.sampled_from(sorted(ORDERS)), st.sampled_from(sorted(PLACEMENTS)))
def test_a_lab_under_its_guarantee_is_never_kept_waiting_by_borrowers(
    snapshot: Snapshot, order: str, placement: str
) -> None:
    owner_job = replace(snapshot.pending[0], lab="owner") if snapshot.pending else None
    if owner_job is None:
        return
    owner_gpus = sum(r.job.total_gpus for r in snapshot.running if r.job.lab == "owner")
    labs = {
        "owner": Lab(name="owner", guaranteed_gpus=owner_gpus + owner_job.total_gpus),
        "guest": Lab(name="guest", guaranteed_gpus=0),
    }
    runs = tuple(replace(r, borrowing=r.job.lab == "guest",
                         job=replace(r.job, preemptible=True)) for r in snapshot.running)
    snap = replace(snapshot, pending=(owner_job,), running=runs, labs=labs)
    policy = Policy(order=order, placement=placement)
    d = schedule(snap, policy)
    if d.starts or owner_job.id not in d.pending_by_id():
        return
    why = d.pending_by_id()[owner_job.id].reason
    if why.code is Code.RECLAIMING:
        victims = {p.job_id for p in d.preemptions}
        assert victims and all(r.borrowing for r in runs if r.job.id in victims)
        return
    # Not reclaiming: then even with every borrower gone the job could not start.
    without = replace(snap, running=tuple(r for r in runs if not r.borrowing), labs={})
    assert schedule(without, policy).starts == (), why
