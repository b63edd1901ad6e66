"""A reply the scheduler's tick read for a woken node is given to that node's held heartbeat only while nothing else
woke or changed the node: a change made after the tick's read (a cancel, another server's start, the end its own
heartbeat recorded) would be missing from it."""

from __future__ import annotations

import pytest

from nanum.server.context import ServerContext
from nanum.server.signals import Signals
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import job, submit, tick
from tests.server.fakeagent import FakeAgent


def test_a_reply_is_given_once_to_the_heartbeat_its_wake_released() -> None:
    signals = Signals()
    read_at = signals.generation("gpu-01")
    signals.wake(["gpu-01"], {"gpu-01": (read_at, "reply")})
    assert signals.ready("gpu-01") == "reply"
    assert signals.ready("gpu-01") is None
    assert signals.ready("gpu-02") is None


def test_a_wake_between_the_read_and_the_wake_that_brings_it_drops_the_reply() -> None:
    signals = Signals()
    read_at = signals.generation("gpu-01")
    signals.wake(["gpu-01"])  # another change, woken after the tick's read
    signals.wake(["gpu-01"], {"gpu-01": (read_at, "reply")})
    assert signals.ready("gpu-01") is None


def test_a_wake_after_the_one_that_brings_it_drops_the_reply() -> None:
    signals = Signals()
    signals.wake(["gpu-01", "gpu-02"], {"gpu-01": (signals.generation("gpu-01"), "one"),
                                        "gpu-02": (signals.generation("gpu-02"), "two")})
    signals.wake(["gpu-01"])
    signals.wake_all()
    assert signals.ready("gpu-01") is None
    assert signals.ready("gpu-02") is None  # every node is woken again: every reply is read anew


def test_a_node_is_holding_only_while_one_of_its_heartbeats_is_held() -> None:
    signals = Signals()
    signals.event("gpu-01")  # a heartbeat that arrived and was answered at once: nothing held
    assert signals.holding() == set()
    with signals.held("gpu-01"):
        with signals.held("gpu-01"):  # a newer one, while the older is being released
            assert signals.holding() == {"gpu-01"}
        assert signals.holding() == {"gpu-01"}
    assert signals.holding() == set()


def started_job(client: AsgiClient, agent: FakeAgent) -> int:
    j = submit(client, gpus=1)["id"]
    tick(client)
    agent.beat()  # starts it
    agent.beat()  # reports it running
    return int(j)


@pytest.mark.parametrize("woken", ["before the end is recorded", "after"])
def test_a_reply_read_before_a_nodes_heartbeat_recorded_an_end_never_reaches_that_node(
        client: AsgiClient, ctx: ServerContext, agent: FakeAgent, woken: str) -> None:
    # A tick read the node's jobs (the job still running) and woke the node with that reply, while the node's
    # heartbeat recorded the job's end: handed out with that heartbeat's acknowledgement, the reply would have the
    # agent start the ended job again.
    j = started_job(client, agent)
    read_at = ctx.signals.generation(agent.name)
    if woken == "after":
        agent.exit(j)
        agent.beat()  # the end is recorded and acknowledged
        ctx.signals.wake_local([agent.name], {agent.name: (read_at, "the list read before the end")})
    else:
        ctx.signals.wake_local([agent.name], {agent.name: (read_at, "the list read before the end")})
        agent.exit(j)
        agent.beat()
    assert job(client, j)["state"] == "completed"
    assert ctx.signals.ready(agent.name) is None
