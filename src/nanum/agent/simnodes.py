"""Many simulated nodes in one process (`nanum agent --simulate-nodes N`), for trying a server at fleet scale.

Each node is a real HTTP client of the server: its own node token, its own connection, its own heartbeats (long
polls) in the agent protocol (`nanum.protocol`). What is simulated is the machine: its GPUs come from
`--simulate-gpus`, and its jobs run no process. A job whose command is `sleep SECONDS` (directly, or as
`sh -c 'sleep SECONDS'`) runs that long and exits 0; any other command exits 0 at once; a job the server stops
ends as if by SIGTERM, and one past its time limit as timed out.

Like a real agent, each node reads its GPUs every `--sample-interval` seconds (a held GPU busy, a free one idle)
and its next heartbeat carries the readings; while jobs run, the server holds its heartbeats at most that long,
so a busy fleet sends one heartbeat with a reading per node and interval, as a real one does.

Tokens come from a file of `NAME TOKEN` lines, one per node (mode 0600, like every token file): the nodes are
the file's, in its order.

A fleet exists to load a server, often on the same machine, so each node's connection is as cheap as an HTTP/1.1
client can be: one kept-alive connection on asyncio's streams, answers read by httptools (`_Connection`). Through
httpx, the 1,000-node benchmark's fleet spent about three quarters of its Python time in the client, a quarter
of a core or more that the server and its database went without.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import os
import shlex
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httptools

import nanum
from nanum.agent.gpus import simulated_gpus
from nanum.agent.link import ANSWER_S, CONNECT_S, HEARTBEAT_PATH
from nanum.protocol import (
    GpuInfo,
    GpuSample,
    Heartbeat,
    HeartbeatReply,
    JobLaunch,
    JobSample,
    JobStatus,
    NodeInfo,
    Sample,
)

__all__ = ["SimulatedNode", "read_node_tokens", "run_nodes"]

log = logging.getLogger("nanum.agent")

#: Readings a node keeps while the server cannot be reached (the oldest go first).
MAX_READINGS = 12
SIGTERM = 15


class NodeTokensError(Exception):
    """The node tokens file cannot be used; the message says why and how to fix it."""


def read_node_tokens(path: Path) -> list[tuple[str, str]]:
    """(name, token) per line of `path`: `NAME TOKEN`; blank lines and `#` comments are skipped."""
    try:
        mode = path.stat().st_mode & 0o777
        text = path.read_text()
    except OSError as exc:
        raise NodeTokensError(f"cannot read {path}: {exc.strerror}") from None
    if mode & 0o077:
        raise NodeTokensError(f"{path} is readable by others (mode {mode:o}); chmod 600 {path}")
    found: list[tuple[str, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2:
            raise NodeTokensError(f"{path} line {number}: expected `NAME TOKEN`, got {len(words)} words")
        found.append((words[0], words[1]))
    if not found:
        raise NodeTokensError(f"{path} names no node; write one `NAME TOKEN` line per node")
    return found


def _seconds(command: list[str]) -> float:
    """How long a simulated job runs: `sleep N` (or `sh -c 'sleep N'`) takes N seconds, anything else none."""
    words = command
    if len(words) == 3 and os.path.basename(words[0]) in ("sh", "bash") and words[1] == "-c":
        try:
            words = shlex.split(words[2])
        except ValueError:
            return 0.0
    if len(words) == 2 and os.path.basename(words[0]) == "sleep":
        try:
            return max(float(words[1]), 0.0)
        except ValueError:
            return 0.0
    return 0.0


@dataclass(slots=True)
class _Run:
    launch: JobLaunch
    started: float
    ends: float
    status: JobStatus | None = None  # set once it has ended


@dataclass(slots=True)
class SimulatedNode:
    """One simulated machine: its inventory, its jobs, and the heartbeat loop that reports them."""

    name: str
    token: str
    gpus: str
    long_poll_s: float = 10.0
    #: seconds between readings of the node's GPUs (0: none)
    sample_interval_s: float = 5.0
    runs: dict[int, _Run] = field(default_factory=dict)
    heartbeats: int = 0
    errors: int = 0
    #: readings not yet delivered, and when the next is due
    readings: list[Sample] = field(default_factory=list)
    next_reading: float = 0.0

    def info(self) -> NodeInfo:
        return NodeInfo(name=self.name, hostname=self.name, gpus=simulated_gpus(self.gpus, self.name), cpus=64,
                        memory_mb=512 * 1024, simulated=True, unix_user=getpass.getuser(),
                        is_root=os.geteuid() == 0, version=nanum.__version__)

    async def run(self, server: _Connection, stopping: asyncio.Event) -> None:
        """Heartbeat until `stopping` is set; a failed heartbeat is retried after a pause."""
        node = self.info()
        while not stopping.is_set():
            now = time.time()
            self._finish(now)
            self._read(now, node.gpus)
            sent = list(self.readings)
            beat = Heartbeat(node=node, jobs=self._statuses(), samples=sent, wait_s=self._wait(now))
            try:
                status, body = await server.post(HEARTBEAT_PATH, beat.model_dump_json().encode(), self.token,
                                                 ANSWER_S + beat.wait_s)
            except (OSError, TimeoutError, httptools.HttpParserError) as exc:
                self.errors += 1
                why = (f"did not answer within {ANSWER_S + beat.wait_s:g} s: it is overloaded or stuck"
                       if isinstance(exc, TimeoutError) else f"cannot be reached ({type(exc).__name__}: {exc})")
                log.warning("node %s: the server at %s %s", self.name, server.url, why)
                await _pause(stopping, 1.0)
                continue
            if status != 200:
                self.errors += 1
                log.warning("node %s: heartbeat answered %d: %s", self.name, status,
                            body[:200].decode(errors="replace"))
                await _pause(stopping, 1.0)
                continue
            self.heartbeats += 1
            del self.readings[:len(sent)]  # delivered: the server has them
            self._apply(HeartbeatReply.model_validate_json(body), time.time())

    def _wait(self, now: float) -> float:
        """Report at once when a job has ended; else wait for the next end, at most a long poll, and while jobs run
        at most until the next reading (as a real agent asks)."""
        if any(r.status is not None for r in self.runs.values()):
            return 0.0
        ends = [r.ends for r in self.runs.values()]
        if self.runs and self.sample_interval_s > 0:
            ends.append(self.next_reading)
        return max(min([self.long_poll_s, *(e - now for e in ends)]), 0.0)

    def _read(self, now: float, inventory: list[GpuInfo]) -> None:
        """Take the readings due by `now`: each GPU a running job holds busy, the others idle. While the server
        cannot be reached, the newest `MAX_READINGS` wait for it."""
        if self.sample_interval_s <= 0 or now < self.next_reading:
            return
        self.next_reading = now + self.sample_interval_s
        held = {g for run in self.runs.values() if run.status is None for g in run.launch.gpus}
        gpus = [GpuSample(index=g.index, util=90.0 if g.index in held else 0.0,
                          memory_mb=g.memory_mb // 2 if g.index in held else 0,
                          power_w=360.0 if g.index in held else 60.0, temperature_c=75.0 if g.index in held else 35.0)
                for g in inventory]
        jobs = [JobSample(job_id=run.launch.job_id, cpu_percent=100.0) for run in self.runs.values()
                if run.status is None]
        self.readings.append(Sample(time=now, gpus=gpus, jobs=jobs))
        del self.readings[:-MAX_READINGS]

    def _finish(self, now: float) -> None:
        for run in self.runs.values():
            if run.status is None and run.ends <= now:
                limit = run.launch.time_limit_s
                timed_out = limit is not None and run.ends - run.started >= limit
                run.status = self._status(run, "exited", ended_at=run.ends, exit_code=None if timed_out else 0,
                                          signal=SIGTERM if timed_out else None, timed_out=timed_out,
                                          stopped=timed_out)

    def _statuses(self) -> list[JobStatus]:
        return [run.status or self._status(run, "running") for run in self.runs.values()]

    def _status(self, run: _Run, state: str, **ended: object) -> JobStatus:
        return JobStatus.model_validate({"job_id": run.launch.job_id, "state": state, "started_at": run.started,
                                         "run": run.launch.run, "log_size": 0, **ended})

    def _apply(self, reply: HeartbeatReply, now: float) -> None:
        """Start what is desired and not held, stop what is held and not desired, forget what is acknowledged."""
        for job_id in reply.ack:
            run = self.runs.get(job_id)
            if run is not None and run.status is not None:
                del self.runs[job_id]
        desired = {launch.job_id: launch for launch in reply.desired}
        for job_id, run in self.runs.items():
            if run.status is None and job_id not in desired:
                run.status = self._status(run, "exited", ended_at=now, signal=SIGTERM, stopped=True)
        for job_id, launch in desired.items():
            if job_id not in self.runs:
                took = _seconds(launch.command)
                if launch.time_limit_s is not None:
                    took = min(took, launch.time_limit_s)
                self.runs[job_id] = _Run(launch, now, now + took)


async def _pause(stopping: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), timeout=seconds)


async def run_nodes(server: str, nodes: list[SimulatedNode], stopping: asyncio.Event) -> None:
    """Run every node's heartbeat loop, each over its own connection, until `stopping` is set."""

    async def one(node: SimulatedNode) -> None:
        connection = _Connection(server)
        try:
            await node.run(connection, stopping)
        finally:
            connection.close()

    await asyncio.gather(*(one(node) for node in nodes))


class _Answer:
    """What httptools reads of one answer (its callbacks). Whether the connection is kept is read as the answer
    completes: the parser forgets it afterwards."""

    __slots__ = ("body", "done", "keep", "parser", "status")

    def __init__(self) -> None:
        self.body = bytearray()
        self.done = self.keep = False
        self.status = 0
        self.parser = httptools.HttpResponseParser(self)

    def on_body(self, data: bytes) -> None:
        self.body += data

    def on_message_complete(self) -> None:
        self.done, self.keep = True, self.parser.should_keep_alive()
        self.status = self.parser.get_status_code()


class _Connection:
    """One node's kept-alive HTTP/1.1 connection to `url` (http or https): a request at a time. A connection the
    server closed while it was idle is made again once; any other failure raises (OSError, TimeoutError)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url}")
        self.url, self._prefix = url, parts.path
        self._host, self._tls = parts.hostname, parts.scheme == "https"
        self._port = parts.port or (443 if self._tls else 80)
        self._authority = parts.netloc.rpartition("@")[2]
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, path: str, body: bytes, token: str, timeout_s: float) -> tuple[int, bytes]:
        """POST `body` (JSON) to `path` with the bearer `token`; (status, body) of the answer."""
        request = (f"POST {self._prefix}{path} HTTP/1.1\r\nHost: {self._authority}\r\n"
                   f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        for fresh in (self._streams is None, True):
            if self._streams is None:
                async with asyncio.timeout(CONNECT_S):
                    self._streams = await asyncio.open_connection(
                        self._host, self._port, ssl=ssl.create_default_context() if self._tls else None)
            reader, writer = self._streams
            answer = _Answer()
            try:
                writer.write(request)
                async with asyncio.timeout(timeout_s):
                    while not answer.done:
                        data = await reader.read(65536)
                        if not data:
                            raise ConnectionResetError("the server closed the connection")
                        answer.parser.feed_data(data)
            except ConnectionError:
                self.close()
                if fresh or answer.body:  # a new connection failed, or an answer had begun: not a stale one
                    raise
                continue
            except BaseException:
                self.close()
                raise
            if not answer.keep:
                self.close()
            return answer.status, bytes(answer.body)
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None
