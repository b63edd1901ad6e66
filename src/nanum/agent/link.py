"""The agent's line to the server: which server its heartbeats go to, with what credentials, and what an answer
means for the round that sent it.

Several servers may share one database (`URL1,URL2`); a heartbeat that cannot reach one, or that a proxy in front
of it answers with "bad gateway", "unavailable" or "gateway timeout", goes to the next in the following round. A
refused token ends the agent before it ever connected (`AgentError`: the message says how to fix it) and is
retried after; any other failure (no answer, an error status, a reply this agent does not understand) fails only
the round (`Retry`), and the jobs keep running.
"""

from __future__ import annotations

import httpx

import nanum
from nanum._http import GATEWAY_FAILURES, error_detail, unexplained
from nanum.protocol import Heartbeat, HeartbeatReply

__all__ = ["HEARTBEAT_PATH", "AgentError", "Retry", "ServerLink", "heartbeat_timeout", "no_answer"]

HEARTBEAT_PATH = "/api/v1/agent/heartbeat"
#: How long a heartbeat waits for its answer beyond the wait it asked the server for (`Heartbeat.wait_s`), and for a
#: connection: a third of the server's default lease (`lease_s`), so that a node retries well before its lease runs
#: out.
ANSWER_S, CONNECT_S = 10.0, 5.0


def heartbeat_timeout(wait_s: float) -> httpx.Timeout:
    """The timeouts of a heartbeat that asked the server to hold it up to `wait_s` seconds."""
    return httpx.Timeout(ANSWER_S + wait_s, connect=CONNECT_S)


def no_answer(exc: httpx.TransportError, server: str, wait_s: float) -> str:
    """Why a heartbeat to `server` got no answer, for the log: a server that took the heartbeat but did not answer
    in time is reachable and too busy (or stuck), not cut off, and the message says which."""
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        within = round(ANSWER_S + wait_s, 1)
        return (f"the server at {server} took the heartbeat but did not answer within {within:g} s "
                f"({type(exc).__name__}): it is overloaded or stuck")
    return f"cannot reach the server at {server} ({type(exc).__name__})"


class AgentError(Exception):
    """The agent cannot go on (for example, the server refuses its token); the message says how to fix it."""


class Retry(Exception):
    """This round failed; try again after a pause. The message is for the log."""


class ServerLink:
    """The servers given (tried in turn) and the node's name and token."""

    def __init__(self, servers: tuple[str, ...], node: str, token: str) -> None:
        self.servers = servers
        self.node = node
        self.token = token
        self._at = 0  # the server in `servers` heartbeats go to

    @property
    def server(self) -> str:
        """The server URL heartbeats go to now."""
        return self.servers[self._at % len(self.servers)]

    def next_server(self) -> str:
        """Move on to the next server given (the same one when there is only one)."""
        self._at = (self._at + 1) % len(self.servers)
        return self.server

    def _move_on(self, client: httpx.AsyncClient) -> tuple[str, str]:
        """Send `client`'s next heartbeats to the next server; (the server left, "; trying URL next" or "" when
        there is no other)."""
        left = self.server
        client.base_url = self.next_server()
        return left, (f"; trying {self.server} next" if self.server != left else "")

    def headers(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/json",
            "User-Agent": f"nanum-agent/{nanum.__version__}",
        }

    async def post(self, client: httpx.AsyncClient, beat: Heartbeat) -> HeartbeatReply:
        """Send one heartbeat; its reply, or `Retry` / `AgentError` saying why there is none."""
        try:
            response = await client.post(
                HEARTBEAT_PATH,
                content=beat.model_dump_json(),
                timeout=heartbeat_timeout(beat.wait_s),
            )
        except httpx.TransportError as exc:
            unreachable, then = self._move_on(client)
            raise Retry(no_answer(exc, unreachable, beat.wait_s) + then) from None
        if response.status_code in (401, 403):
            raise AgentError(
                f"the server at {self.server} refused this node's token "
                f"({response.status_code}); get one with `nanum node add {self.node}`"
            )
        if response.status_code in GATEWAY_FAILURES:  # a proxy whose server is down: as good as no answer
            failed, then = self._move_on(client)
            raise Retry(_refusal(response, failed) + then)
        if response.status_code != 200:
            raise Retry(_refusal(response, self.server))
        try:
            return HeartbeatReply.model_validate_json(response.content)
        except ValueError as exc:
            raise Retry(f"the server sent a reply this agent does not understand: {exc}") from None


def _refusal(response: httpx.Response, server: str) -> str:
    """What a heartbeat's error answer says: nanum's message, else what answered (another web server at the URL,
    a proxy in front of nanum, nanum failing), with a line of text it sent but never a page of HTML."""
    said = f"the server at {server} answered the heartbeat with {response.status_code} {response.reason_phrase}"
    detail = error_detail(response.content)
    if detail:
        return f"{said}: {detail[:300]}"
    return unexplained(said, response.status_code, response.text, server, "--server")
