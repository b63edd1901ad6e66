"""The event loop nanum's long-running processes (the server, agents, a simulated fleet) run on: uvloop's where it
is installed (a dependency of nanum), else asyncio's own. uvloop's costs less for each wake-up and each socket read
or write, which a server answering hundreds of heartbeats a second and an agent starting jobs both do all day."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["run"]

T = TypeVar("T")


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed, else None (asyncio's)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on uvloop's event loop where it is installed."""
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(main)
