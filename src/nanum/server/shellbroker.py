"""Pairing a shell's two websockets: the owner's `nanum shell` and the job's relay, which dials out from its
node (nanum.agent.relay). Whichever connects first waits for the other; then messages flow both ways as they
are (binary: terminal bytes; text: JSON control) until one side closes, and the other is closed with it.

A relay that waits longer than `relay_wait_s` for its user (whose `nanum shell` went away before connecting) is
closed, which hangs up its shell and ends the job: its GPUs are not held for nobody until its time limit.

The pairing lives in the server process: with two servers behind one address, both sides of a shell must reach
the same one.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from starlette.websockets import WebSocket

__all__ = ["ShellBroker"]


@dataclass
class _Waiting:
    side: str
    socket: WebSocket
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


#: How long a shell's relay waits for its user.
RELAY_WAIT_S = 600.0
#: How long closing one side may take.
CLOSE_WAIT_S = 5.0


class ShellBroker:
    def __init__(self, relay_wait_s: float = RELAY_WAIT_S) -> None:
        self._waiting: dict[int, _Waiting] = {}
        self.relay_wait_s = relay_wait_s

    async def join(self, job_id: int, side: str, socket: WebSocket) -> None:
        """Relay between `socket` (an accepted websocket, `side` "user" or "relay") and the job's other side,
        waiting for that one if it has not come yet. Returns when the pair is over."""
        other = self._waiting.get(job_id)
        if other is not None and other.side != side:
            del self._waiting[job_id]
            try:
                await _pipe(socket, other.socket)
            finally:
                if not other.done.done():
                    other.done.set_result(None)
            return
        if other is not None:  # a second connection of the same side replaces the first
            await _close(other.socket, 4409, "replaced by a newer connection")
            if not other.done.done():
                other.done.set_result(None)
        mine = _Waiting(side, socket)
        self._waiting[job_id] = mine
        try:
            await asyncio.wait_for(asyncio.shield(mine.done), self.relay_wait_s if side == "relay" else None)
        except TimeoutError:
            await _close(socket, 4408, "nobody opened this shell")
        finally:
            if self._waiting.get(job_id) is mine:
                del self._waiting[job_id]


async def _pipe(a: WebSocket, b: WebSocket) -> None:
    """Copy both ways until one direction ends (a side closed or failed), then close both sides at once.

    However a direction ended, both sides are closed: a relay left open would keep its shell, and the job's
    GPUs, for a user who is gone (its pings keep the connection alive)."""
    tasks = [asyncio.create_task(_copy(a, b)), asyncio.create_task(_copy(b, a))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(_close(a, 1000, ""), _close(b, 1000, ""))


async def _copy(source: WebSocket, sink: WebSocket) -> None:
    """Copy `source`'s messages to `sink` until `source` closes or either side fails."""
    with contextlib.suppress(Exception):
        while True:
            message = await source.receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("bytes") is not None:
                await sink.send_bytes(message["bytes"])
            elif message.get("text") is not None:
                await sink.send_text(message["text"])


async def _close(socket: WebSocket, code: int, reason: str) -> None:
    """Close `socket`, giving up after `CLOSE_WAIT_S` (a peer that is gone does not answer)."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(socket.close(code=code, reason=reason), CLOSE_WAIT_S)
