"""The heartbeat loop: tell the server what runs on this node, and make the node run what the server wants.

Each round the agent POSTs a `Heartbeat` (inventory, the status of every job it holds, new log output) to
`{server}/api/v1/agent/heartbeat` and reconciles with the `HeartbeatReply`:

1. forget exited jobs the server acknowledged (once the server holds their whole log);
2. stop (SIGTERM, grace, SIGKILL) held running jobs that are no longer desired;
3. start desired jobs it does not hold, but never a run that has ended here (a list read before its end was
   recorded may still name it).

When nothing is waiting to be reported the heartbeat asks the server to hold the reply (`wait_s`, a long
poll), so a new job starts the moment the server decides it. If a job starts or ends meanwhile, the agent
drops the held request and reports at once: exit latency is the time to notice the exit (a pidfd) plus one
round trip. When the server is away the agent keeps its jobs running and retries with backoff, for as long as
its lease lasts: each reply renews it (`lease_s`, counted from when the heartbeat was sent); once it runs out
the agent stops its jobs, which the server then requeues (`nanum.agent.fence`, whose guard process does the
same while the agent is frozen or dead). A reply that arrives after the lease it would renew is ignored: the
server may have given its jobs to other nodes since. One agent at a time may use a state directory (an flock on
STATE/agent.lock).

Every `sample_interval_s` the monitor (`nanum.agent.monitor`) reads the GPUs and jobs; readings ride on the
next heartbeat and are kept until a reply arrives. While jobs run the server holds a heartbeat at most one
sample interval, so their readings reach it within two; a process outside nanum appearing on a GPU, or leaving
it, is reported at once.

This module is the loop; beside it are the line to the server (`nanum.agent.link`), the bookkeeping of the log
bytes the server holds (`nanum.agent.logship`) and the lease kept (`nanum.agent.leasing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from nanum.agent import fence, sessions
from nanum.agent.cgroups import ROOT as CGROUP_ROOT
from nanum.agent.cgroups import probe as probe_cgroups
from nanum.agent.environments import (
    Containers,
    container_name,
    container_sessions,
    find_runtimes,
    in_container,
    present_paths,
)
from nanum.agent.executor import Executor
from nanum.agent.gpus import discover
from nanum.agent.health import make_health
from nanum.agent.leasing import LeaseKeeper
from nanum.agent.link import AgentError, Retry, ServerLink
from nanum.agent.logship import LogShipping
from nanum.agent.monitor import JobView, Monitor, make_sampler
from nanum.agent.nodeinfo import describe_node
from nanum.protocol import GpuInfo, Heartbeat, HeartbeatReply, JobStatus, LogChunk
from nanum.servers import server_urls

__all__ = ["Agent", "AgentConfig"]

log = logging.getLogger("nanum.agent")

CHATTY_WAIT_S = 1.0
OUTPUT_CHECK_S = 0.5
#: How often the agent looks again for the environments and datasets the server asks about.
PATHS_CHECK_S = 30.0
#: How many ended runs the agent remembers, so as never to start one again (`Agent._ended`).
ENDED_KEPT = 10_000


@dataclass(slots=True)
class AgentConfig:
    server: str
    token: str
    name: str
    state_dir: Path
    simulate_gpus: str | None = None
    long_poll_s: float = 10.0
    log_chunk_bytes: int = 256 * 1024
    log_bytes_per_heartbeat: int = 1024 * 1024
    backoff_max_s: float = 10.0
    #: Seconds between readings of the GPUs and jobs (0: no readings).
    sample_interval_s: float = 5.0
    #: Where the cgroup hierarchies are mounted; jobs get a cgroup with their limits where one is writable.
    cgroup_root: Path = CGROUP_ROOT
    #: podman, docker, a path to either, or none; None: whichever answers here.
    container_runtime: str | None = None
    #: Where jobs' checkpoint directories are (shared storage); None: where the server says.
    checkpoint_root: Path | None = None
    #: The name or address other nodes reach this one by (multi-node jobs' rendezvous); None: the host name.
    hostname: str | None = None

    @property
    def servers(self) -> tuple[str, ...]:
        """Every server URL in `server` (`URL1,URL2`: servers sharing one database, tried in turn)."""
        return server_urls(self.server)


class Agent:
    def __init__(self, config: AgentConfig, gpus: list[GpuInfo] | None = None, simulated: bool = False, *,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = config
        #: How heartbeats reach the server (None: the network; tests may pass an in-process transport).
        self.transport = transport
        self._link = ServerLink(config.servers, config.name, config.token)
        if gpus is None:
            gpus, simulated = discover(config.simulate_gpus, config.name)
        self.node = describe_node(config.name, gpus, simulated)
        if config.hostname:
            self.node.hostname = config.hostname
        self.health = make_health(simulated)
        self.cgroups, self.node.limits = probe_cgroups(config.name, config.state_dir, config.cgroup_root)
        runtimes = find_runtimes(config.container_runtime)
        self.containers = Containers(runtimes, simulated_gpus=simulated, limits=self.cgroups is not None)
        self.node.runtimes = sorted(runtimes)
        self._paths_asked: list[str] | None = None
        self._paths_checked = 0.0
        sampler = make_sampler(gpus, simulated, config.state_dir) if config.sample_interval_s > 0 else None
        self.monitor = Monitor(sampler, config.sample_interval_s)
        self.executor: Executor | None = None
        self.heartbeats = 0
        self._logs = LogShipping(config.log_chunk_bytes, config.log_bytes_per_heartbeat)
        self._sent_version = -1
        self._reply = HeartbeatReply()
        #: (job id, run) of the runs ended here and forgotten, newest last: a server's list read before one's end
        #: was recorded may still name it, and it must not run twice (`_apply`).
        self._ended: dict[tuple[int, int | None], None] = {}
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._lease = LeaseKeeper(config.state_dir)
        #: Where notebooks listen (None: found on first use, see `_address`).
        self.address: str | None = None

    @property
    def server(self) -> str:
        """The server URL heartbeats go to now."""
        return self._link.server

    def stop(self) -> None:
        """Ask the loop to end (from any thread). Jobs keep running; the next agent re-adopts them."""
        self._stopping = True
        if self._loop is not None and self._wake is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._wake.set)

    async def run(self) -> None:
        """Heartbeat until `stop()`. Raises `AgentError` when the server refuses this node's token."""
        lock = _lock_state_dir(self.config.state_dir)
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        loop, wake = self._loop, self._wake
        self.executor = Executor(
            self.config.state_dir,
            self.config.name,
            on_change=lambda: loop.call_soon_threadsafe(wake.set),
            cgroups=self.cgroups,
            containers=self.containers,
            checkpoint_root=self.config.checkpoint_root,
        )
        self._lease.take(self._reply.lease_s)
        if os.geteuid() == 0:  # jobs run as their users: a Python for their shells every user may run
            sessions.make_session_python(self.config.state_dir)
            if (problem := sessions.session_python_problem()) is not None:
                log.warning("%s", problem)  # said now, not at the first shell
        sampling = asyncio.create_task(self.monitor.run(self._job_views, wake.set), name="nanum-monitor")
        leasing = asyncio.create_task(self._lease.watch(self._check_lease), name="nanum-lease")
        try:
            async with httpx.AsyncClient(base_url=self.server, headers=self._link.headers(),
                                         transport=self.transport) as client:
                await self._loop_rounds(client)
        finally:
            for task in (sampling, leasing):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._lease.release()
            self.executor.close()
            os.close(lock)
            log.info("agent stopped; running jobs keep running")

    # --- the lease ------------------------------------------------------------------------------------------

    @property
    def fenced(self) -> list[int]:
        """Jobs stopped because the lease ran out (for tests and logs)."""
        return self._lease.fenced

    def _check_lease(self) -> None:
        assert self.executor is not None
        self._lease.check(self.executor.fence, self._reply.lease_s)

    # --- rounds ---------------------------------------------------------------------------------------------

    async def _loop_rounds(self, client: httpx.AsyncClient) -> None:
        failures, connected = 0, False
        while not self._stopping:
            try:
                answered = await self._round(client)
            except Retry as exc:
                failures += 1
                # Retry well within the lease, so that a server back from a restart hears from this node (and
                # of the jobs that ended meanwhile) before it gives the node up.
                pause = min(self.config.backoff_max_s, self._reply.lease_s / 4, 0.25 * 2 ** min(failures, 10))
                if failures == 1 or failures % 10 == 0:
                    log.warning("%s; retrying in %.1fs (jobs keep running)", exc, pause)
                await self._sleep(pause, wake_on_events=False)
                continue
            except AgentError as exc:
                if not connected:
                    raise
                log.error("%s; retrying in %.1fs (jobs keep running)", exc, self.config.backoff_max_s)
                await self._sleep(self.config.backoff_max_s, wake_on_events=False)
                continue
            if not answered:  # dropped for news (or the agent's stop) before any answer: says nothing of the server
                continue
            if failures or not connected:
                log.info("connected to %s as node %s", self.server, self.config.name)
            failures, connected = 0, True

    async def _round(self, client: httpx.AsyncClient) -> bool:
        """One heartbeat and its reply; False when the request was dropped for newer news."""
        assert self.executor is not None and self._wake is not None
        self._check_lease()
        # The executor announces the jobs this agent just started (or stopped) through the loop: let those calls
        # land before clearing, or they would drop the heartbeat that already reports them.
        await asyncio.sleep(0)
        self._wake.clear()
        version = self.executor.version
        statuses = self.executor.statuses()
        chunks = self._logs.chunks(self.executor, statuses)
        # The first heartbeat is answered at once: the node then holds the server's lease and settings, and says it
        # is connected, before it waits for work (held, `nanum up` said so 10 s after it started).
        wait_s = min(self._wait_for(version, statuses, chunks), self._reply.lease_s / 3) if self.heartbeats else 0.0
        started, sent = time.monotonic(), fence.boottime()
        samples = self.monitor.pending()
        problems = self.health.check() if self.health is not None else []
        beat = Heartbeat(node=self.node, jobs=statuses, logs=chunks, samples=samples, wait_s=wait_s,
                         gpu_problems=problems)
        reply = await self._exchange(client, beat)
        if reply is None:
            return False
        self._check_lease()  # a frozen agent that resumes stops its jobs before anything else
        if fence.boottime() >= sent + reply.lease_s:
            raise Retry(f"the server's reply came after this agent's lease ({reply.lease_s:g} s) had run out")
        self._lease.renew(sent, reply.lease_s)
        self.monitor.sent(samples)
        self.heartbeats += 1
        self._sent_version = version
        log.debug(
            "heartbeat (%d jobs, %d log chunks, wait %gs) answered in %.1f ms: %d desired, %d acked",
            len(statuses),
            len(chunks),
            wait_s,
            (time.monotonic() - started) * 1000,
            len(reply.desired),
            len(reply.ack),
        )
        try:
            self._apply(reply, chunks)
        finally:
            self._lease.flush()
        if wait_s > 0:
            await self._pause(started, wait_s)
        return True

    def _wait_for(self, version: int, statuses: list[JobStatus], chunks: list[LogChunk]) -> float:
        """How long the server may hold this heartbeat: not at all when there is news or an ended job's log
        still to send, briefly while running jobs write output (so `nanum logs -f` keeps up), else long.

        A job that started is not news that needs an answer: the server decided it, and records the job's status
        from a held heartbeat as from any other. Holding that heartbeat saves a round trip per start, and the
        server's time while the new job's processes start on the same machine."""
        if version != self._sent_version and any(s.state != "running" for s in statuses):
            return 0.0
        unsent = self._logs.unsent(statuses, chunks)
        if any(s.state != "running" for s in unsent):
            return 0.0
        if unsent or chunks:
            return min(CHATTY_WAIT_S, self.config.long_poll_s)
        if statuses and self.monitor.sampler is not None and self.config.sample_interval_s > 0:
            return min(self.config.long_poll_s, self.config.sample_interval_s)  # jobs' readings arrive promptly
        return self.config.long_poll_s

    async def _exchange(self, client: httpx.AsyncClient, beat: Heartbeat) -> HeartbeatReply | None:
        """POST the heartbeat; give up on a held (long-poll) request as soon as there is news to report: a job
        started or ended, or (looked at every half second) a running job wrote output."""
        assert self._wake is not None
        request = asyncio.ensure_future(self._link.post(client, beat))
        if beat.wait_s == 0:
            return await request
        waker = asyncio.ensure_future(self._wake.wait())
        # Output is news too, but only when no output is in flight (else it would be sent twice).
        baseline = None if beat.logs else {s.job_id: s.log_size or 0 for s in beat.jobs if s.state == "running"}
        while True:
            done, _ = await asyncio.wait({request, waker}, timeout=OUTPUT_CHECK_S, return_when=asyncio.FIRST_COMPLETED)
            if request in done:
                waker.cancel()
                return request.result()
            if done or (baseline and self._new_output(baseline)):
                break
        waker.cancel()
        request.cancel()
        with contextlib.suppress(asyncio.CancelledError, Retry, AgentError):
            await request
        return None

    def _new_output(self, baseline: dict[int, int]) -> bool:
        """Whether a running job wrote output since the heartbeat went out (checked while it is held)."""
        assert self.executor is not None
        return any(self.executor.log_size(job_id) > size for job_id, size in baseline.items())

    async def _pause(self, started: float, wait_s: float) -> None:
        """After a long poll that came back early with nothing to do, keep to the server's interval (unless
        there is news), so a server that does not hold replies is not asked in a busy loop."""
        assert self.executor is not None
        if self._stopping or self.executor.version != self._sent_version:
            return
        pause = min(self._reply.interval_s, wait_s) - (time.monotonic() - started)
        await self._sleep(pause, wake_on_events=True)

    async def _sleep(self, seconds: float, *, wake_on_events: bool) -> None:
        assert self._wake is not None
        if seconds <= 0 or self._stopping:
            return
        if not wake_on_events:
            deadline = time.monotonic() + seconds
            while not self._stopping and (left := deadline - time.monotonic()) > 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), min(left, 0.5))
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    # --- reconciling ----------------------------------------------------------------------------------------

    def _apply(self, reply: HeartbeatReply, sent: list[LogChunk]) -> None:
        assert self.executor is not None
        self._reply = reply
        self._logs.update(self.executor, reply, sent)
        self._check_paths(reply.check_paths)
        for ran in self._logs.forget_acked(self.executor):
            self._ended[ran] = None
            if len(self._ended) > ENDED_KEPT:
                del self._ended[next(iter(self._ended))]
        held = self.executor.held()
        desired = {launch.job_id: launch for launch in reply.desired}
        for job_id, state in held.items():
            if state == "running" and job_id not in desired:
                log.info("stopping job %d (no longer on the server's list)", job_id)
                self.executor.stop(job_id)  # with the grace its launch carries (its lab's)
        new = []
        for job_id, launch in desired.items():
            if job_id in held:
                continue
            if launch.run and (job_id, launch.run) in self._ended:
                log.warning("job %d: its run %d has ended here already; not starting it again (the server's list "
                            "was read before that end was recorded)", job_id, launch.run)
                continue
            new.append(sessions.prepared(launch, address=self._address(), server=self.server))
        for launch in new:
            self._logs.offsets[launch.job_id] = 0
        for launch, status in zip(new, self.executor.start_all(new, allow_root=reply.allow_root), strict=True):
            log.info("job %d: %s", launch.job_id, _describe_start(status, launch.gpus))

    def _check_paths(self, asked: list[str] | None) -> None:
        """Look for the paths the server asks about (when they change, and every PATHS_CHECK_S); the next
        heartbeat reports those found."""
        if asked is None or (asked == self._paths_asked and time.monotonic() < self._paths_checked + PATHS_CHECK_S):
            return
        self._paths_asked, self._paths_checked = asked, time.monotonic()
        found = present_paths(asked)
        if found != self.node.paths:
            self.node.paths = found
            self._sent_version = -1  # news: the next heartbeat goes out at once

    def _job_views(self) -> list[JobView]:
        """The running jobs, as the monitor needs them (from the executor's own records)."""
        assert self.executor is not None
        running = self.executor.running()
        boxes = {container_name(r.launch): r.job_id for r, _, _ in running if in_container(r.launch)}
        inside = container_sessions(boxes) if boxes else {}
        return [
            JobView(r.job_id, pid, tuple(r.launch.gpus), r.launch.env, started, r.activity_path,
                    sessions=tuple(s for s, job in inside.items() if job == r.job_id))
            for r, pid, started in running
        ]

    def _address(self) -> str:
        """The address this node's notebooks listen on: the one it reaches the server from."""
        if self.address is None:
            self.address = sessions.reach_address(self.server)
        return self.address


def _lock_state_dir(state_dir: Path) -> int:
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / "agent.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AgentError(f"another agent is using {state_dir}; stop it first or pass another --state-dir") from None
    return fd


def _describe_start(status: JobStatus, gpus: list[int]) -> str:
    if status.state == "failed_to_start":
        return f"failed to start: {status.reason}"
    return f"started on GPUs {','.join(map(str, gpus)) or 'none'} (pid {status.pid})"
