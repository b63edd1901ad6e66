"""Work a server does in the background every so often: written batches (`nanum.server.lastseen`, the GPU readings
of `nanum.server.monitoring`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("nanum.server")


async def flush_every(period_s: float, flush: Callable[[], Any], what: str) -> None:
    """Run `flush` in a thread every `period_s` until cancelled, then once more (a server that stops writes what it
    holds). A failure is logged once until a flush succeeds again: "could not write {what}"."""
    failing = False
    try:
        while True:
            await asyncio.sleep(period_s)
            try:
                await asyncio.to_thread(flush)
            except Exception:
                if not failing:
                    log.warning("could not write %s; retrying", what, exc_info=True)
                failing = True
            else:
                failing = False
    finally:
        try:
            await asyncio.to_thread(flush)
        except Exception:
            log.warning("could not write %s", what, exc_info=True)
