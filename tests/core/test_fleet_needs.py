"""What a job asks of a node beyond room: any of several GPU models, at least so much GPU memory, node labels;
and the reasons that name what is missing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanum.core import Code, Gpu, Node, Policy, schedule
from nanum.core.quota import impossible
from tests.core.builders import job, node, snap


def _reason(d, job_id: int) -> str:  # type: ignore[no-untyped-def]
    return str(d.pending_by_id()[job_id].reason)


def _where(d) -> dict[int, str]:  # type: ignore[no-untyped-def]
    return {s.job_id: s.placements[0].node for s in d.starts}


def _mem_node(name: str, mib: int) -> Node:
    return Node(name=name, gpus=(Gpu(0, "A100", mib), Gpu(1, "A100", mib)))


@pytest.mark.parametrize(
    ("models", "expected"),
    [
        pytest.param(frozenset({"A100", "H100"}), "h", id="any-of-takes-the-free-one"),
        pytest.param(frozenset({"H100"}), "h", id="one-in-a-set"),
    ],
)
def test_a_job_accepting_several_models_runs_on_any_of_them(models: frozenset[str], expected: str) -> None:
    cluster = (node("a", gpus=1, model="A100"), node("h", gpus=1, model="H100"), node("v", gpus=1, model="V100"))
    busy_a = job(1, gpu_model="A100")
    d = schedule(snap(cluster, (busy_a, job(2, gpu_models=models))), Policy())
    assert _where(d) == {1: "a", 2: expected}


def test_no_node_of_any_wanted_model_is_named_in_the_reason() -> None:
    d = schedule(snap((node("a", model="A100"),), (job(1, gpu_models=frozenset({"H100", "B200"})),)), Policy())
    assert _reason(d, 1) == "needs GPU model B200 or H100; the cluster has A100"


def test_gpu_memory_is_a_lower_bound() -> None:
    cluster = (_mem_node("small", 40960), _mem_node("big", 81920))
    d = schedule(snap(cluster, (job(1, gpus=2, gpu_memory_mb=65536), job(2, gpus=2, gpu_memory_mb=40960))), Policy())
    assert _where(d) == {1: "big", 2: "small"}
    d = schedule(snap((_mem_node("small", 40960),), (job(3, gpu_memory_mb=81920),)), Policy())
    assert d.pending_by_id()[3].reason.code is Code.IMPOSSIBLE
    assert _reason(d, 3) == "needs GPUs with at least 81920 MiB each; the most any node's GPUs have is 40960 MiB"


def test_constraints_match_labels_and_the_reason_names_the_missing_one() -> None:
    cluster = (node("plain"), node("ib", labels=frozenset({"net=ib", "rack=r1"})))
    d = schedule(snap(cluster, (job(1, labels=frozenset({"net=ib"})), job(2, labels=frozenset({"net=ib", "ssd=1"})))),
                 Policy())
    assert _where(d) == {1: "ib"}
    assert _reason(d, 2) == "needs node label ssd=1; no node has it"


@settings(max_examples=300, deadline=None)
@given(
    shapes=st.lists(st.tuples(st.integers(0, 8), st.sampled_from(["A100", "H100"]), st.sampled_from([None, "a", "b"])),
                    max_size=8),
    gpus=st.integers(0, 9),
    count=st.integers(1, 4),
    models=st.sampled_from([frozenset(), frozenset({"H100"}), frozenset({"A100", "H100"}), frozenset({"V100"})]),
    lend=st.booleans(),
)
def test_a_job_is_refused_at_submit_exactly_when_too_few_nodes_could_ever_hold_it(
        shapes: list[tuple[int, str, str | None]], gpus: int, count: int, models: frozenset[str], lend: bool) -> None:
    cluster = tuple(node(f"n{i}", g, model, owner=owner) for i, (g, model, owner) in enumerate(shapes))
    asked = job(1, gpus=gpus, lab="a", nodes=count, gpu_models=models)
    could_hold = [n for n in cluster if (lend or n.owner in (None, "a")) and (not models or n.gpu_model in models)
                  and len(n.gpus) >= gpus]
    reason = impossible(asked, cluster, {}, lend)
    assert (reason is None) == (len(could_hold) >= count), reason
    if reason is not None:
        assert reason.code is Code.IMPOSSIBLE and reason.message


def test_a_job_asking_for_more_nodes_than_exist_is_refused_however_many_it_asks_for() -> None:
    for count in (3, 2**64):
        reason = impossible(job(1, gpus=1, nodes=count), (node("a"), node("b")), {}, True)
        assert reason is not None and f"needs {count} nodes with 1 GPU each; only 2 such nodes exist" in reason.message
    reason = impossible(job(2, gpus=2, nodes=2), (node("a", gpus=2), node("b", gpus=1)), {}, True)
    assert reason is not None and "needs 2 nodes with 2 GPUs each; only 1 such node exists" in reason.message
