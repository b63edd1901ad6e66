"""The server's read caches: an entry many threads ask for at once is loaded once, and an expired one keeps
serving while its successor loads."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from nanum.server.context import TtlCache


def test_threads_asking_at_once_load_a_missing_entry_once() -> None:
    cache: TtlCache[str, int] = TtlCache(60.0)
    loads = 0
    gate = threading.Event()

    def load() -> int:
        nonlocal loads
        loads += 1
        gate.wait(5)
        return 42

    with ThreadPoolExecutor(8) as pool:
        answers = [pool.submit(cache.get_or_load, "all", load) for _ in range(8)]
        time.sleep(0.2)  # every thread is waiting on the one load by now
        gate.set()
        assert [a.result(timeout=10) for a in answers] == [42] * 8
    assert loads == 1


def test_an_expired_entry_serves_while_one_thread_loads_its_successor() -> None:
    cache: TtlCache[str, int] = TtlCache(0.05)
    cache.put("all", 1)
    time.sleep(0.1)  # expired
    started, gate = threading.Event(), threading.Event()

    def slow() -> int:
        started.set()
        gate.wait(5)
        return 2

    with ThreadPoolExecutor(1) as pool:
        loading = pool.submit(cache.get_or_load, "all", slow)
        assert started.wait(5)
        assert cache.get_or_load("all", lambda: 99) == 1  # not a second load: the last value meanwhile
        gate.set()
        assert loading.result(timeout=10) == 2
    assert cache.get_or_load("all", lambda: 99) == 2


def test_a_failed_load_is_tried_again_by_the_next_caller() -> None:
    cache: TtlCache[str, int] = TtlCache(60.0)

    def broken() -> int:
        raise RuntimeError("database away")

    with pytest.raises(RuntimeError, match="database away"):
        cache.get_or_load("all", broken)
    assert cache.get_or_load("all", lambda: 7) == 7


def test_a_cleared_entry_is_loaded_anew() -> None:
    cache: TtlCache[str, int] = TtlCache(60.0)
    assert cache.get_or_load("all", lambda: 1) == 1
    cache.clear()
    assert cache.get_or_load("all", lambda: 2) == 2


def _busy(seconds: float) -> None:
    """Spend `seconds` of this thread's CPU."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def test_keep_sets_how_long_a_loaded_value_serves_from_the_cpu_its_load_took() -> None:
    cache: TtlCache[str, int] = TtlCache(60.0)
    took: list[float] = []

    def keep(seconds: float) -> float:
        took.append(seconds)
        return 0.0 if seconds < 0.05 else 60.0

    assert cache.get_or_load("all", lambda: 1, keep) == 1
    assert cache.get_or_load("all", lambda: 2, keep) == 2  # a quick load is not kept
    assert cache.get_or_load("all", lambda: time.sleep(0.06) or 5, keep) == 5  # nor one that only waited
    assert cache.get_or_load("all", lambda: 2, keep) == 2
    assert cache.get_or_load("all", lambda: _busy(0.06) or 3, keep) == 3
    assert cache.get_or_load("all", lambda: 4, keep) == 3  # a slow one is
    assert took[0] < 0.05 and took[2] < 0.05 <= took[4]
