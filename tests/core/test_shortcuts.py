"""The cycle's shortcuts for long queues change only its cost: with each one turned off, every decision and every
reason is the same.

- `Partition.settled`: a job behind its partition's head that gets no estimate skips `CycleState.reserve`;
- `CycleState.why`: the reason a job without an estimate waits is written once per shape and capacity version;
- `nanum.core.steps._near`: victims are looked for only among the runs that could free enough in the job's buckets;
- `Admission`: `admit` with each lab's and user's budget and limits looked up once;
- `pending` and `reason`: `Pending` and `Reason` written without the generated `__init__`.
"""

from __future__ import annotations

from unittest import mock

from hypothesis import example, given, settings
from hypothesis import strategies as st

from nanum.core import (
    ORDERS,
    PLACEMENTS,
    Decisions,
    Job,
    JobId,
    Lab,
    Limits,
    Placement,
    Policy,
    Running,
    Snapshot,
    User,
    schedule,
)
from nanum.core.cycle import CycleState, Partition, Shape
from nanum.core.decision import Code, Pending, Reason, pending, reason
from nanum.core.quota import Admission, Usage, admit
from tests.core.builders import job, lab, node, running, snap
from tests.core.test_invariants import clusters

policies = st.sampled_from(sorted(ORDERS)).flatmap(lambda order: st.builds(
    Policy,
    order=st.just(order),
    placement=st.sampled_from(sorted(PLACEMENTS)),
    backfill=st.sampled_from(("easy", "none")),
    lend=st.booleans(),
    reclaim=st.booleans(),
    estimate_depth=st.integers(1, 3),
    preempt=st.booleans() if order in ("las", "gittins") else st.just(False),
))


class _Forgetful(dict[tuple[Shape, int, bool, bool], object]):
    """A memo that never remembers: every job's reason is worked out afresh."""

    def get(self, key: object, default: object = None) -> object:
        return default


def _without_shortcuts(snapshot: Snapshot, policy: Policy) -> Decisions:
    reserve, init = CycleState.reserve, CycleState.__init__

    def reserve_unsettled(self: CycleState, job: Job, shape: Shape, part: Partition) -> object:
        found = reserve(self, job, shape, part)
        part.settled = False
        return found

    def init_forgetful(self: CycleState, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        self.why = _Forgetful()  # type: ignore[assignment]

    with (mock.patch.object(CycleState, "reserve", reserve_unsettled),
          mock.patch.object(CycleState, "__init__", init_forgetful),
          mock.patch("nanum.core.steps._near", lambda c, runs, reach, keys, gpus: runs)):
        return schedule(snapshot, policy)


@st.composite
def crowded(draw: st.DrawFn) -> Snapshot:
    """A queue of many jobs of a few shapes on a busy cluster, where labs borrow: the case the shortcuts are for."""
    nodes = tuple(node(f"n{i}", draw(st.sampled_from([4, 8])), draw(st.sampled_from(["A100", "H100"])), islands=2)
                  for i in range(draw(st.integers(2, 6))))
    free = {n.name: [g.index for g in n.gpus] for n in nodes}
    runs = []
    for i in range(draw(st.integers(0, 10))):
        where = draw(st.sampled_from(nodes)).name
        want = draw(st.integers(1, 4))
        if len(free[where]) < want:
            continue
        taken, free[where] = tuple(free[where][:want]), free[where][want:]
        end = draw(st.sampled_from([None, 50.0, 300.0, 900.0]))
        runs.append(running(job(100 + i, want, lab=draw(st.sampled_from("ab")), time_limit=1000.0,
                                priority=draw(st.integers(0, 9))), {where: taken}, start=0.0, end=end,
                            borrowing=draw(st.booleans()), over_reservation=draw(st.booleans())))
    shapes = draw(st.lists(st.tuples(st.integers(1, 8), st.sampled_from([1, 1, 2]),
                                     st.sampled_from([None, "A100", "H100"])), min_size=1, max_size=3))
    pending = []
    for i in range(draw(st.integers(1, 16))):
        gpus, count, model = draw(st.sampled_from(shapes))
        pending.append(job(i + 1, gpus, lab=draw(st.sampled_from("ab")), nodes=count, gpu_model=model,
                           time_limit=draw(st.sampled_from([None, 60.0, 400.0, 2000.0])),
                           attained_gpu_seconds=draw(st.sampled_from([0.0, 20000.0]))))
    labs = tuple(lab(name, draw(st.sampled_from([None, 0, 4, 16])), max_gpus=draw(st.sampled_from([None, 6, 40])))
                 for name in "ab")
    return snap(nodes, tuple(pending), tuple(runs), labs=labs)


# Lab c's 3-node job waits first; lab a's 2-node job fits on n0 and n1 but waits behind it (no backfill). A gang
# that fits now has nothing to reclaim: both walks leave it alone, and it waits behind job 1 holding no GPU.
GANG_BEHIND_THE_HEAD = snap(
    (node("n0"), node("n1"), node("n2", model="H100"), node("n3")),
    (job(1, 4, lab="c", nodes=3, gpu_model="A100"), job(2, 4, lab="a", nodes=2, gpu_model="A100")),
    (running(job(10, 4, lab="b", priority=0), {"n2": (0, 1, 2, 3)}, borrowing=True),
     running(job(11, 2, lab="b", priority=5), {"n3": (0, 1)}, borrowing=True)),
    labs=(lab("a", 16), lab("b", 0), lab("c")))
# The same with a borrower on n1, so the gang fits on n0 alone: the walk over every borrower passes over the
# cheapest (on the H100 node, no use to it) and stops at the one on n3; the walk over those that could help
# starts there.
GANG_HALF_FITTING = snap(
    GANG_BEHIND_THE_HEAD.nodes, GANG_BEHIND_THE_HEAD.pending,
    (*GANG_BEHIND_THE_HEAD.running, running(job(12, 1, lab="b", priority=9), {"n1": (0,)}, borrowing=True)),
    labs=tuple(GANG_BEHIND_THE_HEAD.labs.values()))


@settings(max_examples=250, deadline=None)
@given(st.one_of(clusters(), crowded()), policies)
@example(GANG_BEHIND_THE_HEAD, Policy(order="fifo", backfill="none"))
@example(GANG_HALF_FITTING, Policy(order="fifo", backfill="none"))
def test_the_shortcuts_change_no_start_preemption_reason_or_estimate(snapshot: Snapshot, policy: Policy) -> None:
    assert schedule(snapshot, policy) == _without_shortcuts(snapshot, policy)


limits = st.builds(Limits, max_gpus=st.sampled_from([None, 0, 3, 8]), max_running_jobs=st.sampled_from([None, 1, 4]),
                   monthly_gpu_hours=st.sampled_from([None, 10.0, 500.0]))
names = st.sampled_from(["a", "b", "c"])
used = st.sampled_from([0.0, 20.0])
#: (lab, user, GPUs, nodes) of a job
asks = st.tuples(names, names, st.integers(0, 8), st.integers(1, 3))


def _job(i: int, ask: tuple[str, str, int, int]) -> Job:
    return Job(id=JobId(i), lab=ask[0], user=ask[1], gpus=ask[2], nodes=ask[3])


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(names, st.tuples(limits, used)), st.dictionaries(names, st.tuples(limits, used)),
       st.lists(asks, max_size=6), asks)
def test_admission_refuses_exactly_as_admit_does(
    labs: dict[str, tuple[Limits, float]], users: dict[str, tuple[Limits, float]],
    running: list[tuple[str, str, int, int]], asked: tuple[str, str, int, int],
) -> None:
    lab_map = {name: Lab(name=name, limits=lim, used_gpu_hours=hours) for name, (lim, hours) in labs.items()}
    user_map = {name: User(name=name, limits=lim, used_gpu_hours=hours) for name, (lim, hours) in users.items()}
    usage = Usage()
    for i, ask in enumerate(running):
        usage.add(_job(i, ask))
    job = _job(99, asked)
    assert Admission(lab_map, user_map, "May").refuse(job, usage) == admit(job, usage, lab_map, user_map, "May")


@given(st.lists(asks, max_size=8))
def test_usage_of_running_jobs_counts_as_adding_them_one_by_one(running: list[tuple[str, str, int, int]]) -> None:
    runs = tuple(Running(job=_job(i, ask), placements=(Placement("n", ()),), start_time=0.0)
                 for i, ask in enumerate(running))
    one_by_one = Usage()
    for run in runs:
        one_by_one.add(run.job)
    of = Usage.of(runs)
    assert of == one_by_one
    assert [list(c) for c in (of.lab_gpus, of.lab_jobs, of.user_gpus, of.user_jobs)] == [
        list(c) for c in (one_by_one.lab_gpus, one_by_one.lab_jobs, one_by_one.user_gpus, one_by_one.user_jobs)]


@given(st.sampled_from(Code), st.text(max_size=5), st.integers(0, 9), st.none() | st.floats(0, 9),
       st.none() | st.integers(0, 9))
def test_the_fast_writers_give_what_the_constructors_give(
    code: Code, message: str, job_id: int, estimate: float | None, ahead: int | None,
) -> None:
    fast = pending(JobId(job_id), reason(code, message), estimate, ahead)
    slow = Pending(job_id=JobId(job_id), reason=Reason(code, message), estimated_start=estimate, ahead=ahead)
    assert fast == slow
    assert hash(fast) == hash(slow)
    assert repr(fast) == repr(slow)
