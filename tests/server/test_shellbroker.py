"""The pairing of a shell's two websockets, with stand-ins for the sockets (the real ones are tested end to end in
tests/e2e/test_sessions.py): messages flow both ways once both came, and a relay nobody joins is closed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nanum.server import shellbroker
from nanum.server.shellbroker import ShellBroker


class Socket:
    """What the broker uses of a websocket: receive, send, close."""

    def __init__(self, incoming: list[dict[str, Any]]) -> None:
        self.incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for message in incoming:
            self.incoming.put_nowait(message)
        self.sent: list[bytes | str] = []
        self.closed: int | None = None

    async def receive(self) -> dict[str, Any]:
        return await self.incoming.get()

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)

    async def send_text(self, data: str) -> None:
        self.sent.append(data)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed = code
        self.incoming.put_nowait({"type": "websocket.disconnect"})


def test_the_user_and_the_relay_are_joined_whichever_comes_first() -> None:
    async def run() -> tuple[Socket, Socket]:
        broker = ShellBroker()
        relay = Socket([{"type": "websocket.receive", "bytes": b"$ "},
                        {"type": "websocket.receive", "text": '{"exit": 3}'},
                        {"type": "websocket.disconnect"}])  # the relay ends once the shell did
        user = Socket([{"type": "websocket.receive", "bytes": b"exit 3\r"}])
        waiting = asyncio.create_task(broker.join(7, "relay", relay))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        await asyncio.wait_for(broker.join(7, "user", user), 5)  # type: ignore[arg-type]
        await asyncio.wait_for(waiting, 5)
        return relay, user

    relay, user = asyncio.run(run())
    assert user.sent[:2] == [b"$ ", '{"exit": 3}'] and relay.sent[:1] == [b"exit 3\r"]
    assert relay.closed == 1000 and user.closed == 1000


def test_a_relay_nobody_joins_is_closed() -> None:
    async def run() -> Socket:
        relay = Socket([])
        await asyncio.wait_for(ShellBroker(relay_wait_s=0.05).join(8, "relay", relay), 5)  # type: ignore[arg-type]
        return relay

    assert asyncio.run(run()).closed == 4408


class Gone(Socket):
    """A user whose connection has dropped: sending to it fails (with whatever the server's stack raises) and
    closing it never completes."""

    async def send_bytes(self, data: bytes) -> None:
        raise ConnectionError("the user's connection is gone")  # not a WebSocketDisconnect

    async def close(self, code: int = 1000, reason: str = "") -> None:
        await asyncio.sleep(3600)


def test_the_relay_is_closed_when_its_user_drops_whatever_sending_to_the_user_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shellbroker, "CLOSE_WAIT_S", 0.05)

    async def run() -> Socket:
        broker = ShellBroker()
        relay = Socket([{"type": "websocket.receive", "bytes": b"sleep 600\r\n"}])  # the shell echoes on
        user = Gone([])  # it never says it left: only sending to it fails
        waiting = asyncio.create_task(broker.join(9, "relay", relay))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        await asyncio.wait_for(broker.join(9, "user", user), 5)  # type: ignore[arg-type]
        await asyncio.wait_for(waiting, 5)
        return relay

    assert asyncio.run(run()).closed == 1000  # the relay hangs up its shell, and the job ends
