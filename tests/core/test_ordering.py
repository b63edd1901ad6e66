"""`ordered`: a queue in an order's sequence, computing the key once per group of alike jobs, is exactly the queue
sorted by the key, whatever the jobs, their siblings, the labs' usage and the predictor's history."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nanum.core import HistoryPredictor, Job, JobId, Lab, OrderContext, User
from nanum.core.ordering import ORDERS, ordered
from tests.core.builders import job, running

HOUR = 3600.0


class PerJob:
    """A predictor that knows each job apart (as the simulator's oracle does): no order may group by its
    predictions."""

    def __init__(self, seconds: dict[int, float]) -> None:
        self.seconds = seconds

    def predict(self, j: Job) -> float | None:
        return self.seconds.get(int(j.id))


def sorted_by_key(queue: list[Job], order: object, ctx: OrderContext) -> list[Job]:
    """The sequence by definition: sorted by the key, then arranged."""
    out = sorted(queue, key=lambda j: order.sort_key(j, ctx))  # type: ignore[attr-defined]
    arrange = getattr(order, "arrange", None)
    return out if arrange is None else list(arrange(out))


#: mostly alike, as a queue of sweeps is, so that groups form and differ in one field at a time
fields = st.fixed_dictionaries({
    "user": st.sampled_from("aab"),
    "lab": st.sampled_from("xxy"),
    "name": st.sampled_from(["train", "train", ""]),
    "gpus": st.sampled_from([1, 1, 2]),
    "nodes": st.sampled_from([1, 1, 1, 2]),
    "tier": st.sampled_from([0, 0, 0, 1]),
    "attained_gpu_seconds": st.sampled_from([0.0, 0.0, 0.0, HOUR, 3 * HOUR, 5 * HOUR]),
    "priority": st.sampled_from([0, 0, 50]),
    "time_limit": st.sampled_from([None, None, HOUR]),
    "burst": st.sampled_from([None, 900, 901]),
    "submit": st.sampled_from([1.0, 2.0, 3.0]),  # ties: the id decides
})


#: finished jobs mostly like the waiting ones, so that their histories reach the index's minimum of samples
history_fields = st.fixed_dictionaries({
    "user": st.sampled_from("aab"),
    "lab": st.sampled_from("xxy"),
    "name": st.sampled_from(["", "train"]),
    "gpus": st.just(1),
})


@settings(max_examples=300, deadline=None)
@given(
    pending=st.lists(fields, min_size=4, max_size=40),
    learned=st.lists(st.tuples(history_fields, st.floats(60.0, 2 * HOUR)), min_size=10, max_size=40),
    usage=st.tuples(st.floats(0.0, 100 * HOUR), st.floats(0.0, 100 * HOUR)),
    predictor_kind=st.sampled_from(["none", "history", "per-job"]),
    now=st.floats(1000.0, 5000.0),
)
def test_grouped_order_is_the_sorted_order(
    pending: list[dict[str, object]], learned: list[tuple[dict[str, object], float]], usage: tuple[float, float],
    predictor_kind: str, now: float,
) -> None:
    queue = [job(i, **f) for i, f in enumerate(pending, start=1)]  # type: ignore[arg-type]
    history = HistoryPredictor()
    for i, (f, seconds) in enumerate(learned):
        history.observe(job(5000 + i, **f), seconds)  # type: ignore[arg-type]
    predictor = {"none": None, "history": history,
                 "per-job": PerJob({j.id: 100.0 * (j.id % 7) for j in queue})}[predictor_kind]
    # Running siblings of the bursts 900 and 901 (the burst's first job, 900, runs itself).
    siblings = (running(job(900, burst=None, gpus=1), {"n0": (0,)}, start=now - 500),
                running(job(902, burst=JobId(900), gpus=1), {"n0": (1,)}, start=now - 2000),
                running(job(903, burst=JobId(901), gpus=2), {"n0": (2, 3)}, start=now - 50))
    labs = {"x": Lab(name="x", decayed_usage=usage[0]), "y": Lab(name="y", decayed_usage=usage[1])}
    users = {"a": User(name="a", decayed_usage=usage[1]), "b": User(name="b", decayed_usage=usage[0])}
    for name, order_type in ORDERS.items():
        order = order_type()
        fresh = OrderContext(now, labs, users, 16, predictor, siblings)
        expected = sorted_by_key(list(queue), order, OrderContext(now, labs, users, 16, predictor, siblings))
        assert [j.id for j in ordered(queue, order, fresh)] == [j.id for j in expected], name


def test_a_sweep_has_its_key_computed_once() -> None:
    """What grouping is for: a user's sweep of alike jobs, in one burst, is ordered with one key (not one a job),
    and keeps its submission order."""
    history = HistoryPredictor()
    for i in range(6):
        history.observe(job(5000 + i, name="train"), HOUR)
    sweep = [job(i, name="train", burst=JobId(1) if i > 1 else None) for i in range(1, 1001)]
    other = job(2000, name="eval", user="b", submit=0.5)
    computed = []

    class Counting(ORDERS["gittins"]):  # type: ignore[misc, valid-type]
        def sort_key(self, j: Job, ctx: OrderContext) -> tuple[float, ...]:
            computed.append(j.id)
            return super().sort_key(j, ctx)  # type: ignore[no-any-return]

    queue = ordered([*reversed(sweep), other], Counting(), OrderContext(100.0, {}, {}, 8, history))
    assert len(computed) == 2  # the burst (its first job names it) and the other user's job
    assert [j.id for j in queue if j.user == "u"] == list(range(1, 1001))
