"""A quiet heartbeat that carries no output, from a node whose last heartbeat here left its answer, is answered from
memory on the event loop, without a thread: with the log offsets the last answer gave, never an offset of an
earlier run of a job handed to the node again."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager

import pytest

from nanum.protocol import LogChunk
from nanum.server.services import agent as agent_service
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ALICE, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent
from tests.server.test_longpoll import held, live, node  # noqa: F401  (fixtures)
from tests.server.test_quiet_memory import counting_calls


def _handled(monkeypatch: pytest.MonkeyPatch) -> AbstractContextManager[list[int]]:
    """How many heartbeats meanwhile were handled in a thread (`services.agent.heartbeat`), not from memory."""
    return counting_calls(monkeypatch, agent_service, "heartbeat")


def test_a_quiet_heartbeat_without_output_is_answered_from_memory_with_the_offsets_last_given(
    client: AsgiClient, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = submit(client, gpus=1)["id"]
    tick(client)
    agent.beat()  # starts it
    agent.logs = [LogChunk(job_id=j, offset=0, data="epoch 1\n")]
    assert agent.beat().log_offsets == {j: 8}
    with _handled(monkeypatch) as threads:
        for _ in range(3):
            reply = agent.beat()
            assert [d.job_id for d in reply.desired] == [j]
            assert reply.log_offsets == {j: 8}
        assert threads == [0]
        agent.logs = [LogChunk(job_id=j, offset=8, data="epoch 2\n")]
        assert agent.beat().log_offsets == {j: 16}  # output: handled in a thread, which writes it
        assert threads == [1]
        assert agent.beat().log_offsets == {j: 16}  # and remembered
        assert threads == [1]


def test_a_change_since_is_never_answered_from_memory(
    client: AsgiClient, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = submit(client, gpus=1)["id"]
    tick(client)
    agent.beat()
    agent.beat()
    k = submit(client, gpus=1)["id"]
    tick(client)  # wakes the node
    with _handled(monkeypatch) as threads:
        assert sorted(d.job_id for d in agent.beat().desired) == [j, k]
        assert threads == [1]
    r = client.post(f"/api/v1/jobs/{j}/cancel", headers=auth(ALICE))
    assert r.status_code == 200, r.text
    with _handled(monkeypatch) as threads:
        assert [d.job_id for d in agent.beat().desired] == [k]
        assert threads == [1]


def test_a_job_handed_back_to_its_node_after_a_requeue_is_told_its_new_run_holds_no_output(
    client: AsgiClient, agent: FakeAgent
) -> None:
    j = submit(client, gpus=1)["id"]
    tick(client)
    agent.beat()
    agent.logs = [LogChunk(job_id=j, offset=0, data="first run\n")]
    assert agent.beat().log_offsets == {j: 10}
    assert agent.beat().log_offsets == {j: 10}  # from memory
    r = client.post(f"/api/v1/jobs/{j}/requeue", headers=auth(ALICE))
    assert r.status_code == 200, r.text
    agent.beat()  # no longer desired: the agent stops it
    agent.beat()  # reports its end
    assert not agent.running and not agent.exited
    tick(client)
    agent.beat()  # handed to this node again: its second run starts
    assert job(client, j)["state"] == "running"
    for _ in range(3):
        # The second run's output starts at 0 on the agent: an offset of the first run would make it skip 10 bytes.
        assert agent.beat().log_offsets.get(j, 0) == 0


def _running(agent: FakeAgent, job_id: int) -> None:
    deadline = time.monotonic() + 5
    while job_id not in agent.running and time.monotonic() < deadline:
        agent.beat()


def test_the_heartbeat_after_a_held_reply_that_started_a_job_is_told_the_new_job_holds_no_output(
    live: AsgiClient, node: FakeAgent, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    first = submit(live, gpus=1)["id"]
    _running(node, first)
    node.logs = [LogChunk(job_id=first, offset=0, data="epoch 1\n")]
    assert node.beat().log_offsets == {first: 8}
    thread, replies = held(node, wait_s=10)
    second = submit(live, gpus=1)["id"]
    thread.join(timeout=5)
    assert [d.job_id for d in replies[0].desired] == [first, second]
    with _handled(monkeypatch) as threads:
        assert node.beat().log_offsets == {first: 8, second: 0}  # reports both running: from memory
        assert threads == [0]


def test_a_job_handed_back_by_a_held_reply_after_a_requeue_is_told_its_new_run_holds_no_output(
    live: AsgiClient, node: FakeAgent  # noqa: F811
) -> None:
    first = submit(live, gpus=1)["id"]
    _running(node, first)
    node.logs = [LogChunk(job_id=first, offset=0, data="first run\n")]
    assert node.beat().log_offsets == {first: 10}
    r = live.post(f"/api/v1/jobs/{first}/requeue", headers=auth(ALICE))
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 5
    while (node.running or node.exited) and time.monotonic() < deadline:
        node.beat()  # stops it, reports its end
    assert not node.running and not node.exited
    thread, replies = held(node, wait_s=10)
    thread.join(timeout=5)  # the scheduler hands it back to the only node
    assert [d.job_id for d in replies[0].desired] == [first]
    for _ in range(3):
        # Its second run's output starts at 0 on the agent: an offset of the first run would make it skip 10 bytes.
        assert node.beat().log_offsets.get(first, 0) == 0
