"""A simulated node's connection to the server (`nanum.agent.simnodes._Connection`): real TCP against a small
server of the test's own, one kept-alive connection, made again where the server closed it while idle."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from nanum.agent.simnodes import _Connection


async def _serve(answers: list[bytes], close_after_each: bool) -> tuple[asyncio.Server, list[bytes], list[int]]:
    """A server that answers each request with the next of `answers`; it records the requests and counts the
    connections."""
    seen: list[bytes] = []
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        with contextlib.suppress(asyncio.IncompleteReadError):  # the client closed it
            while answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                seen.append(head + await reader.readexactly(length))
                writer.write(answers.pop(0))
                await writer.drain()
                if close_after_each:
                    break
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, seen, connections


def _ok(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


def _url(server: asyncio.Server) -> str:
    return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def test_answers_come_back_over_one_kept_alive_connection() -> None:
    async def main() -> None:
        server, seen, connections = await _serve([_ok(b'{"a":1}'), _ok(b'{"b":2}')], close_after_each=False)
        connection = _Connection(_url(server))
        assert await connection.post("/api/v1/agent/heartbeat", b'{"x":1}', "tok", 5) == (200, b'{"a":1}')
        assert await connection.post("/api/v1/agent/heartbeat", b"{}", "tok", 5) == (200, b'{"b":2}')
        connection.close()
        server.close()
        await server.wait_closed()
        assert len(connections) == 1
        assert seen[0].startswith(b"POST /api/v1/agent/heartbeat HTTP/1.1\r\n")
        assert b"Authorization: Bearer tok\r\n" in seen[0] and seen[0].endswith(b'\r\n\r\n{"x":1}')

    asyncio.run(main())


def test_a_connection_the_server_closed_while_idle_is_made_again() -> None:
    async def main() -> None:
        server, _, connections = await _serve([_ok(b"1"), _ok(b"2")], close_after_each=True)
        connection = _Connection(_url(server))
        assert await connection.post("/x", b"{}", "tok", 5) == (200, b"1")
        await asyncio.sleep(0.05)  # the server has closed it meanwhile
        assert await connection.post("/x", b"{}", "tok", 5) == (200, b"2")
        connection.close()
        server.close()
        await server.wait_closed()
        assert len(connections) == 2

    asyncio.run(main())


def test_no_server_and_no_answer_raise() -> None:
    async def main() -> None:
        server, _, _ = await _serve([], close_after_each=False)
        url = _url(server)
        server.close()
        await server.wait_closed()
        with pytest.raises(OSError):
            await _Connection(url).post("/x", b"{}", "tok", 5)

        held: list[asyncio.StreamWriter] = []

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            held.append(writer)  # reads the request and never answers

        mute = await asyncio.start_server(silent, "127.0.0.1", 0)
        with pytest.raises(TimeoutError):
            await _Connection(_url(mute)).post("/x", b"{}", "tok", 0.2)
        for writer in held:
            writer.close()
        mute.close()
        await mute.wait_closed()

    asyncio.run(main())


def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match="not an http"):
        _Connection("ftp://example.org")
