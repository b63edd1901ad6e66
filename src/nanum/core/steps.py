"""The steps a blocked job may take, named by the policy: reclaim, take back, preempt a lower class.

A job that cannot start now is offered to each step the policy names (`Policy.steps`), in this order, until one
acts; each step either preempts victims so that the job can start once they have stopped (the job then waits with
a reason saying so) or returns False and leaves the cycle as it was:

1. `reclaim` — the job's lab is under its guarantee: preempt the cheapest borrowers of other labs whose GPUs let it
   start (`victim_key`: lowest priority, latest started, fewest GPUs lost).
2. `take-back` — the job is its partition's first blocked job: preempt jobs that were backfilled over its
   reservation (`nanum.core.preempt`).
3. `preempt` — preempt running jobs the order ranks in a lower priority class (Tiresias' discretised LAS, or the
   Gittins classes), of the job's own lab or borrowers.

Example: lab a (guarantee 4) waits with a 4-GPU job while lab b borrows a's node with two 2-GPU jobs. `reclaim`
walks b's borrowers cheapest first, counting what each frees on its node, until the node would fit the job; both
are preempted, the node's free GPUs are held for the job, and it starts in the next cycle once they have stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from nanum.core.cycle import CycleState, Shape
from nanum.core.decision import Code, Preempt, Reason
from nanum.core.model import Job, Placement, Running, serves
from nanum.core.placement import fits
from nanum.core.preempt import attained, class_victim_key, may_preempt
from nanum.core.quota import victim_key
from nanum.core.state import NodeFree


class Step(Protocol):
    """A step for a blocked job. Returns True when it preempted for `job` (which then waits with a reason), False
    when it cannot help; it may then leave only cycle-long memos behind. `borrowing` is True in the second pass
    (the job is known to borrow), `borrows` whether it would borrow at all."""

    def __call__(self, c: CycleState, job: Job, shape: Shape, *, first: bool, borrows: bool,
                 borrowing: bool) -> bool: ...


def reclaim(c: CycleState, job: Job, shape: Shape, *, first: bool, borrows: bool, borrowing: bool) -> bool:
    """Preempt the cheapest borrowers whose GPUs let `job` start; their GPUs stay theirs until they stop.

    Borrowers of other labs are taken in `victim_key` order, counting what each frees on its nodes, until enough
    nodes would fit the job: so the chosen nodes are those whose most expensive victim is cheapest. Only the victims
    on the chosen nodes are preempted. A failure is remembered for the rest of the cycle: borrowers only ever become
    fewer and free GPUs scarcer.

    A gang that fits now (it waits only behind its partition's first blocked job, as the backfill rule says) has no
    borrower to reclaim from: it falls through to the next step and waits with the backfill rule's reason. It must
    not hold the free GPUs either: with no victim to stop, nothing would free more of them for it, and they would
    only be kept from the jobs after it."""
    lab = c.snap.labs.get(job.lab)
    if borrowing or lab is None or lab.guaranteed_gpus is None or shape in c.no_reclaim:
        return False
    if job.nodes > 1 and c.place(job, shape) is not None:
        return False  # not remembered: a gang of this shape may no longer fit later in the cycle
    borrowers, reach = _reclaim_index(c)
    near = _near(c, borrowers, reach, shape.keys, job.gpus)
    chosen = _victims_for(c, job, shape.keys, (r for r in borrowers if r.job.lab != job.lab), reach,
                          (r for r in near if r.job.lab != job.lab))
    if chosen is None:
        c.no_reclaim.add(shape)
        return False
    fitting, victims = chosen
    victims.sort(key=victim_key)
    _stop_for(c, job, fitting, victims, lambda run: (
        f"lab {job.lab} reclaims its guaranteed GPUs for job {job.ref}; job {run.job.ref} was borrowing"),
        lambda ids: Reason(Code.RECLAIMING, f"reclaiming guaranteed GPUs from borrowing job(s) {ids}"))
    return True


def take_back(c: CycleState, job: Job, shape: Shape, *, first: bool, borrows: bool, borrowing: bool) -> bool:
    """Preempt jobs started over a reservation so that `job`, its partition's first blocked job, can start."""
    if not first:
        return False
    over = c.over_runs()
    if not over or c.place(job, shape) is not None:
        return False
    runs = [r for r in over if may_preempt(job, r)]
    chosen = _victims_for(c, job, shape.keys, runs, _reach(c, runs)) if runs else None
    if chosen is None:
        return False
    fitting, victims = chosen
    _stop_for(c, job, fitting, victims, lambda run: (
        f"job {job.ref} takes back the GPUs reserved for it; job {run.job.ref} was backfilled over that reservation"),
        lambda ids: Reason(Code.PREEMPTING, f"taking back its reserved GPUs from job(s) {ids}, backfilled over "
                                            "its reservation"))
    return True


def preempt_lower(c: CycleState, job: Job, shape: Shape, *, first: bool, borrows: bool, borrowing: bool) -> bool:
    """Preempt running jobs of a lower class than `job` so that it can start; False if that cannot help.

    A job that would borrow even once its victims of its own lab have stopped preempts only borrowers: its lab's
    jobs within the guarantee would come back ahead of it (owners' jobs start before borrowers), and it would stop
    them again and again."""
    if c.place(job, shape) is not None:
        return False  # it fits now: only backfill holds it back, and preempting would not change that
    assert c.classes is not None
    mine = c.classes.level(job, job.attained_gpu_seconds)
    if (mine, shape, borrows) in c.no_preempt:
        return False
    runs, reach = _lower_index(c, mine, job, False)
    chosen = _victims_for(c, job, shape.keys, runs, reach, _near(c, runs, reach, shape.keys, job.gpus))
    # Which victims come first follows their checkpoints, and decides here whether the job preempts at all.
    c.ranked = c.ranked or chosen is not None
    if chosen is not None and borrows and _would_come_back_first(c, job, chosen[1]):
        runs, reach = _lower_index(c, mine, job, True)
        chosen = _victims_for(c, job, shape.keys, runs, reach, _near(c, runs, reach, shape.keys, job.gpus))
    if chosen is None:
        c.no_preempt.add((mine, shape, borrows))
        return False
    fitting, victims = chosen
    level = c.run_classes().level
    victims.sort(key=lambda r: class_victim_key(level(r), r))
    _stop_for(c, job, fitting, victims, lambda run: (
        f"job {job.ref} (class {mine}) preempts job {run.job.ref} (class {level(run)}, "
        f"{attained(run, c.snap.now) / 3600:.1f} GPU-hours received)"),
        lambda ids: Reason(Code.PREEMPTING, f"class {mine}: preempting lower-class job(s) {ids}"))
    return True


#: every step a policy may name, in the order a blocked job tries them.
STEPS: dict[str, Step] = {"reclaim": reclaim, "take-back": take_back, "preempt": preempt_lower}


# -- choosing victims ------------------------------------------------------------------------------------------------

def _victims_for(c: CycleState, job: Job, keys: list[tuple[str | None, str]], runs: Iterable[Running],
                 reach: dict[int, int], near: Iterable[Running] | None = None,
                 ) -> tuple[list[int], list[Running]] | None:
    """Walk `runs` (cheapest victim first), counting what each frees on its nodes, until enough nodes would fit
    `job`: the chosen node indices and the victims on them, or None when even all of them are not enough. `reach`
    bounds, per node, free GPUs plus what all of `runs` there could free. `near`, when given, is `runs` less those
    the walk would pass over (`_near`): walked instead.

    A gang first counts the nodes it fits on now; if they are enough already, no victim is needed and the answer
    is None (no step asks for such a gang), so the victims are never an empty list. A single-node job's walk counts
    every node, one it fits on now included."""
    allowed = set(keys)
    state = c.state
    fitting: list[int] = []
    if job.nodes > 1:
        fitting = [nf.index for nf in state.candidates(keys, job.gpus, True) if fits(nf, job, None)]
        if len(fitting) >= job.nodes:
            return None
    if near is not None:
        runs = near
    freed: dict[int, list[int]] = {}  # node index -> [GPUs, CPUs, MiB] the victims so far would free
    taken: dict[int, list[Running]] = {}
    for run in runs:
        if run.job.id in c.victims:
            continue
        for p in run.placements:
            nf = state.by_name.get(p.node)  # None: a node this cycle does not see (removed), which frees nothing
            if nf is None or nf.key not in allowed or reach.get(nf.index, 0) < job.gpus or nf.index in fitting:
                continue
            extra = freed.setdefault(nf.index, [0, 0, 0])
            extra[0] += len(p.gpus)
            extra[1] += run.job.cpus
            extra[2] += run.job.memory_mb
            taken.setdefault(nf.index, []).append(run)
            if _fits_with(nf, job, extra):
                fitting.append(nf.index)
        if len(fitting) >= job.nodes:
            break
    if len(fitting) < job.nodes:
        return None
    return fitting, list({r.job.id: r for idx in fitting for r in taken.get(idx, ())}.values())


def _stop_for(c: CycleState, job: Job, fitting: list[int], victims: list[Running], why: Callable[[Running], str],
              waits: Callable[[str], Reason]) -> None:
    """Preempt `victims` (in this order) so that `job` can start on the `fitting` nodes once they stopped; `why`
    says why each stops, `waits(ids)` why `job` waits meanwhile.

    The victims keep their GPUs until they have stopped; the job starts in a later cycle. The GPUs already free on
    the chosen nodes are held for it meanwhile: a job started on them later in this cycle would be the next victim,
    and `job` would wait for ever."""
    for idx in fitting:
        nf = c.state.nodes[idx]
        hold = min(len(nf.free), job.gpus)
        if hold:
            c.state.take(Placement(nf.node.name, nf.pick_gpus(hold)), job)
    c.usage.add(job)
    for run in victims:
        c.victims.add(run.job.id)  # still counted in its lab's usage until it has stopped
        c.preemptions.append(Preempt(job_id=run.job.id, for_job=job.id, reason=why(run)))
    c.wait(job, waits(", ".join(str(i) for i in sorted(r.job.id for r in victims))))


def _would_come_back_first(c: CycleState, job: Job, victims: list[Running]) -> bool:
    """Whether a victim of `job`'s own lab is within the guarantee while `job` would still borrow after they all
    stopped: that victim would start again before `job`."""
    own = [run for run in victims if run.job.lab == job.lab]
    if all(run.borrowing for run in own):
        return False
    guarantee = c.snap.labs[job.lab].guaranteed_gpus or 0
    return c.usage.lab_gpus[job.lab] - sum(run.gpus for run in own) + job.total_gpus > guarantee


def _lower_index(c: CycleState, level: int, job: Job, borrowers_only: bool) -> tuple[list[Running], dict[int, int]]:
    """Running jobs `job` may preempt (class below `level`; only borrowers if it borrows), cheapest first, and per
    node the GPUs that free plus theirs reach (see `_reclaim_index`). Cached per (level, lab, borrows) for the
    cycle."""
    key = (level, job.lab, borrowers_only)
    hit = c.lower.get(key)
    if hit is None:
        runs = list(c.run_classes().victims(job.lab, level, borrowers_only))
        hit = c.lower[key] = (runs, _reach(c, runs))
    return hit


def _near(c: CycleState, runs: list[Running], reach: dict[int, int], keys: list[tuple[str | None, str]],
          gpus: int) -> list[Running]:
    """The runs of a cycle-long index (`_reclaim_index`, `_lower_index`) that `_victims_for` may count for a job of
    `gpus` GPUs per node in `keys`' buckets: those with a node there that `reach` says could free that many. It
    passes over all others, so it chooses the same victims from these alone. Cached per (index, buckets, GPUs); a
    run on a node the cluster no longer has stays in, as `_victims_for` reads every node of the runs it is given."""
    key = (id(runs), tuple(keys), gpus)
    hit = c.near.get(key)
    if hit is None:
        hit = c.near[key] = []
        by_name, allowed = c.state.by_name, set(keys)
        for run in runs:
            for p in run.placements:
                nf = by_name.get(p.node)
                if nf is None or (nf.key in allowed and reach.get(nf.index, 0) >= gpus):
                    hit.append(run)
                    break
    return hit


def _reach(c: CycleState, runs: list[Running]) -> dict[int, int]:
    reach: dict[int, int] = {}
    for run in runs:
        for p in run.placements:
            nf = c.state.by_name.get(p.node)
            if nf is not None:
                reach[nf.index] = reach.get(nf.index, len(nf.free)) + len(p.gpus)
    return reach


def _reclaim_index(c: CycleState) -> tuple[list[Running], dict[int, int]]:
    """Preemptible borrowers, cheapest victim first, and per node the GPUs that free plus borrowed reach (an upper
    bound all cycle long: free GPUs only get fewer). Built on first need."""
    if c.reclaimable is None:
        runs = sorted((r for r in c.snap.running if r.borrowing and r.job.preemptible), key=victim_key)
        c.reclaimable = (runs, _reach(c, runs))
    return c.reclaimable


def _fits_with(nf: NodeFree, job: Job, extra: list[int]) -> bool:
    """Would `job` fit on `nf` once `extra` = [GPUs, CPUs, MiB] more were free?"""
    return (
        len(nf.free) + extra[0] >= job.gpus
        and (nf.cpus is None or nf.cpus + extra[1] >= job.cpus)
        and (nf.memory_mb is None or nf.memory_mb + extra[2] >= job.memory_mb)
        and serves(nf.node, job)
    )
