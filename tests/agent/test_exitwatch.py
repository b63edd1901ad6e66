"""Noticing a job's end: by its pidfd while it runs, and at once when it ended before it could be watched."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from nanum.agent.exitwatch import ExitWatch


@pytest.fixture
def watch() -> Iterator[ExitWatch]:
    exits = ExitWatch()
    yield exits
    exits.close()


def test_a_running_process_is_reported_when_it_ends(watch: ExitWatch) -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        watch.watch(4, proc.pid)
        assert list(watch.ended(watch.wait(0))) == []  # the wake of `watch` itself, and no end
        assert watch.polled == set()
        proc.kill()
        assert list(watch.ended(watch.wait(5))) == [4]
    finally:
        proc.kill()
        proc.wait()


def test_a_process_gone_before_it_is_watched_is_reported_at_once_not_polled(watch: ExitWatch) -> None:
    # A job that ends within a millisecond or two: its waiter has exited and been reaped before the agent has its pid.
    proc = subprocess.Popen(["true"])
    proc.wait()
    watch.watch(5, proc.pid)
    assert watch.polled == set()
    assert list(watch.ended(watch.wait(0))) == [5]
    assert list(watch.ended(watch.wait(0))) == []


def test_a_gone_process_unwatched_meanwhile_is_not_reported(watch: ExitWatch) -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    watch.watch(6, proc.pid)
    watch.unwatch(6)
    assert list(watch.ended(watch.wait(0))) == []
