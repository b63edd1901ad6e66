"""CycleCache and `explain=False` change only the cost of a cycle: a driver loop gets the same decisions with and
without them (without reasons, the same starts and preemptions)."""

from __future__ import annotations

import random

import pytest

from nanum.core import CycleCache, Decisions, Job, JobId, Lab, Policy, Running, Snapshot, schedule
from tests.core.builders import node, running


def _drive(policy: Policy, seed: int, steps: int = 120, swap_nodes_at: int | None = None,
           shared: int = 0, tell: bool = False) -> list[Decisions]:
    """A small event loop over 2 labs × 3 nodes (the last `shared` of them nobody's): arrivals, completions,
    preemptions; checks every cycle. `tell`: the loop tells the cache every run that comes and goes."""
    rng = random.Random(seed)
    nodes = tuple(node(f"n{i}", 4, owner=None if i >= 6 - shared else "a" if i < 3 else "b") for i in range(6))
    labs = {"a": Lab(name="a", guaranteed_gpus=12), "b": Lab(name="b", guaranteed_gpus=12)}
    pending: dict[int, Job] = {}
    live: dict[int, Running] = {}
    cache = CycleCache()
    told = cache.expect if tell else lambda came=(), gone=(): None
    seen: list[Decisions] = []
    now, next_id = 0.0, 1
    for step in range(steps):
        now += rng.choice([0.0, 5.0, 30.0, 300.0])
        for _ in range(rng.randint(0, 3)):
            gpus = rng.choice([1, 1, 2, 4])
            pending[next_id] = Job(id=JobId(next_id), user=f"u{next_id % 3}", lab=rng.choice("ab"), gpus=gpus,
                                   nodes=rng.choice([1, 1, 1, 2]), submit_time=now,
                                   time_limit=rng.choice([None, 600.0, 3600.0]))
            next_id += 1
        for jid in [j for j in live if rng.random() < 0.2]:
            told(gone=(live.pop(jid),))
        for jid in [j for j in live if rng.random() < 0.2]:  # a new object for the same run: a checkpoint
            run = live[jid]
            live[jid] = Running(job=run.job, placements=run.placements, start_time=run.start_time,
                                expected_end=run.expected_end, borrowing=run.borrowing, last_checkpoint=now,
                                over_reservation=run.over_reservation)
            told(came=(live[jid],), gone=(run,))
        if swap_nodes_at == step:
            nodes = tuple(node(n.name, 4, owner=n.owner) for n in nodes)  # same cluster, new objects
        snap = Snapshot(now=now, nodes=nodes, pending=tuple(pending.values()), running=tuple(live.values()),
                        labs=labs)
        told()
        plain, cached = schedule(snap, policy), schedule(snap, policy, cache=cache)
        assert cached == plain, f"seed {seed}, step {step}"
        quiet = schedule(snap, policy, cache=cache, explain=False)
        assert quiet == Decisions(plain.starts, plain.preemptions, ()), f"seed {seed}, step {step}"
        seen.append(plain)
        for p in plain.preemptions:
            run = live.pop(p.job_id)
            pending[p.job_id] = run.job
            told(gone=(run,))
        for s in plain.starts:
            job = pending.pop(s.job_id)
            live[s.job_id] = Running(job=job, placements=s.placements, start_time=now,
                                     expected_end=s.expected_end, borrowing=s.borrowing,
                                     over_reservation=s.over_reservation)
            told(came=(live[s.job_id],))
    assert cache.reuses > steps // 2  # most cycles really reused the carried state
    return seen


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    "text, lend",
    [
        pytest.param("fifo+binpack+backfill", True, id="pooled-fifo-backfill"),
        pytest.param("fifo+nobackfill", False, id="partitioned-fifo"),
        pytest.param("shortest+spread+backfill", True, id="pooled-shortest-spread"),
        pytest.param("las+topology+backfill", False, id="partitioned-las-topology"),
        pytest.param("las+binpack+backfill+preempt", False, id="partitioned-las-preempt"),
        pytest.param("gittins+binpack+backfill+preempt", True, id="pooled-gittins-preempt"),
    ],
)
def test_cached_cycles_decide_like_fresh_ones(text: str, lend: bool, seed: int) -> None:
    decisions = _drive(Policy.parse(text, lend=lend), seed)
    assert sum(len(d.starts) for d in decisions) > 20  # the loop really scheduled something


@pytest.mark.parametrize("seed", range(4))
def test_estimates_of_later_jobs_leave_the_decisions_alone(seed: int) -> None:
    """Partitions meet on shared nodes, where one's estimates are future usage for the other's reservation."""
    policy = Policy.parse("las+backfill+preempt", lend=False, estimate_depth=4)
    decisions = _drive(policy, seed, steps=300, shared=2)
    assert sum(p.estimated_start is not None for d in decisions for p in d.pending) > 100


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("lend", [True, False], ids=["pooled", "no-owners"])
def test_a_cycle_that_explains_nothing_over_one_partition_reserves_only_its_first_blocked_job(
        seed: int, lend: bool) -> None:
    """Over one partition the later reservations are only estimates: without them (`explain=False`, as the server's
    quiet ticks and the simulator cycle) the same jobs start, on the same GPUs."""
    policy = Policy.parse("gittins+binpack+backfill+preempt", lend=lend, estimate_depth=50)
    rng = random.Random(seed)
    nodes = tuple(node(f"n{i}", 4, owner="a" if lend and i < 3 else None) for i in range(6))
    labs = {"a": Lab(name="a", guaranteed_gpus=12), "b": Lab(name="b", guaranteed_gpus=12)}
    pending = tuple(Job(id=JobId(i), user=f"u{i % 3}", lab=rng.choice("ab"), gpus=rng.choice([1, 2, 4, 8]),
                        nodes=rng.choice([1, 1, 2]), submit_time=float(i), time_limit=rng.choice([None, 600.0]))
                    for i in range(1, 80))
    live = tuple(running(Job(id=JobId(100 + i), user="u9", lab="b", gpus=2, time_limit=900.0 * (i + 1)),
                         {f"n{i}": (0, 1)}, end=900.0 * (i + 1)) for i in range(6))
    snap = Snapshot(now=10.0, nodes=nodes, pending=pending, running=live, labs=labs)
    told = schedule(snap, policy)
    quiet = schedule(snap, policy, explain=False)
    assert quiet == Decisions(told.starts, told.preemptions, ())
    assert told.starts and sum(p.estimated_start is not None for p in told.pending) > 1  # later jobs were estimated


@pytest.mark.parametrize("text, lend", [("las+binpack+backfill+preempt", False), ("fifo+backfill", True)])
def test_a_driver_that_tells_what_came_and_went_gets_the_same_decisions(text: str, lend: bool) -> None:
    decisions = _drive(Policy.parse(text, lend=lend), seed=3, steps=200, tell=True)
    assert any(d.preemptions for d in decisions)
    if "preempt" in text:  # jobs started over a reservation came and went, and were taken back
        assert any(s.over_reservation for d in decisions for s in d.starts)


def test_what_the_driver_told_is_checked_against_the_number_of_running_jobs() -> None:
    nodes = (node("n0", 4),)
    j1, j2 = Job(id=JobId(1), user="u", lab="l", gpus=2), Job(id=JobId(2), user="u", lab="l", gpus=2)
    later = Job(id=JobId(3), user="u", lab="l", gpus=2, submit_time=1.0)
    cache, first = CycleCache(), running(j1, {"n0": (0, 1)})
    schedule(Snapshot(now=0.0, nodes=nodes, running=(first,)), Policy(), cache=cache)
    second = running(j2, {"n0": (2, 3)})
    cache.expect(came=(second,))  # but job 1 also ended, and the driver forgot to say so
    snap = Snapshot(now=1.0, nodes=nodes, pending=(later,), running=(second,))
    assert schedule(snap, Policy(), cache=cache).starts == schedule(snap, Policy()).starts != ()
    assert cache.rebuilds == 1


def test_going_back_in_time_rebuilds() -> None:
    nodes = (node("n0", 4),)
    big = Job(id=JobId(1), user="u", lab="l", gpus=4)
    small = Job(id=JobId(2), user="u", lab="l", gpus=1, submit_time=1.0)
    runs = (running(big, {"n0": (0, 1, 2, 3)}),)
    policy, cache = Policy.parse("las+backfill+preempt", lend=False), CycleCache()
    for now in (36000.0, 3600.0):  # 40, then 4 GPU-hours received: class 2, then 1
        snap = Snapshot(now=now, nodes=nodes, pending=(small,), running=runs)
        assert schedule(snap, policy, cache=cache) == schedule(snap, policy)
    assert cache.rebuilds == 2


def test_new_node_tuple_rebuilds_and_still_agrees() -> None:
    _drive(Policy.parse("fifo+backfill", lend=True), seed=7, swap_nodes_at=40)


def test_reclaim_cycles_agree() -> None:
    decisions = _drive(Policy.parse("fifo+backfill", lend=True), seed=11, steps=200)
    assert any(d.preemptions for d in decisions)


def test_inconsistent_running_set_falls_back_to_a_rebuild() -> None:
    nodes = (node("n0", 4),)
    j1 = Job(id=JobId(1), user="u", lab="l", gpus=2)
    j2 = Job(id=JobId(2), user="u", lab="l", gpus=2)
    j3 = Job(id=JobId(3), user="u", lab="l", gpus=1, submit_time=1.0)
    cache = CycleCache()
    schedule(Snapshot(now=0.0, nodes=nodes, running=(running(j1, {"n0": (0, 1)}),)), Policy(), cache=cache)
    clash = (running(j1, {"n0": (0, 1)}), running(j2, {"n0": (1, 2)}))  # GPU 1 twice: a driver bug
    snap = Snapshot(now=1.0, nodes=nodes, pending=(j3,), running=clash)
    assert schedule(snap, Policy(), cache=cache) == schedule(snap, Policy())
    assert cache.rebuilds == 2
