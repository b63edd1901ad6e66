"""`nanum.heap.settle`: what a long-running process keeps is frozen, and what it throws away later is still freed,
cycles included (a server that stopped collecting would grow without end)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from nanum import heap


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def settled() -> Iterator[None]:
    thresholds = gc.get_threshold()
    heap.settle()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_settle_freezes_what_the_process_holds_and_raises_the_first_threshold(settled: None) -> None:
    assert gc.get_freeze_count() > 1000  # the modules and objects this test process holds
    assert gc.get_threshold() == heap.THRESHOLDS
    assert gc.isenabled()


def test_a_cycle_made_after_settle_is_still_collected(settled: None) -> None:
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    assert gone() is not None  # a cycle: reference counting alone never frees it
    gc.collect()
    assert gone() is None
