"""The executor: runs job processes on this node, stops them, enforces time limits, and notices when they end.

It keeps one `JobRecord` per job it holds (running, or ended and not yet forgotten) in STATE/jobs/<id>/, so a
new Executor over the same state directory re-adopts jobs that are still running (same pid *and* same start
time) and reads the exit status of those that ended meanwhile. A watcher thread waits on a pidfd per job (a 20
ms poll where the kernel has no pidfds), so an exit is seen at once; it also sends the SIGKILL that follows a
SIGTERM after the grace period and the SIGTERM when a time limit runs out. `on_change` is called (from any
thread) whenever a job starts, fails to start or ends.

Stopping a job sends SIGTERM to its whole process group after creating its preempt file, then SIGKILL to the
group after the grace period. When a job's main command ends, anything it left running in its process group is
killed too: a job's GPUs are free when the server hears that it ended. Beside it: the waiting for exits
(`nanum.agent.exitwatch`), what an end means (`nanum.agent.endings`) and STATE/jobs/ (`nanum.agent.jobsdir`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from nanum.agent import fence, procs
from nanum.agent.accounts import Refused, agent_account, job_account
from nanum.agent.cgroups import Cgroups, oom_reason
from nanum.agent.endings import NODE_FAULTS, describe_end, failed_to_start, set_result, workdir_failure
from nanum.agent.environments import (
    Containers,
    container_command,
    container_ended,
    host_command,
    in_container,
    runtime_env,
    terminate_container,
)
from nanum.agent.exitwatch import POLL_S, ExitWatch
from nanum.agent.jobrecord import JobRecord, read_exit_file, read_log, read_workdir_failure
from nanum.agent.jobsdir import Spares, discard, empty_trash, make_jobs_dir
from nanum.agent.launch import Spawning, check_fields, find_setpriv, job_env, launcher, prepare, spawn
from nanum.agent.sessions import refuse_unrunnable, relayed
from nanum.protocol import JobLaunch, JobStatus

__all__ = ["Executor"]

log = logging.getLogger("nanum.agent")

MAX_SLEEP_S = 5.0
#: How often the running jobs' output is measured against their `max_output_bytes`, and the most grace a job
#: that wrote more gets: it may be writing hundreds of megabytes a second.
OUTPUT_CHECK_S = 1.0
OUTPUT_GRACE_S = 5.0


class Executor:
    def __init__(
        self,
        state_dir: Path,
        node: str,
        *,
        on_change: Callable[[], object] | None = None,
        cgroups: Cgroups | None = None,
        containers: Containers | None = None,
        checkpoint_root: Path | None = None,
    ) -> None:
        """`cgroups`: where jobs get a cgroup holding them to their CPUs and memory (None: jobs run without).
        `containers`: the node's container runtimes; `checkpoint_root`: where jobs' checkpoint directories are
        (shared storage), in place of the directory the server names."""
        self.node = node
        self.jobs_dir = Path(state_dir) / "jobs"
        self.version = 0
        self._on_change = on_change
        self._agent = agent_account()
        self._boot = procs.boot_id()
        self._setpriv = find_setpriv()
        self._cgroups = cgroups
        self._containers = containers or Containers()
        self._checkpoint_root = checkpoint_root
        self._cond = threading.Condition(threading.RLock())
        self._jobs: dict[int, JobRecord] = {}
        self._exits = ExitWatch()
        self._output_checked = 0.0
        self._closed = False
        self._trash = False
        make_jobs_dir(self.jobs_dir, self._agent.uid)
        with self._cond:
            self._adopt()
            if cgroups is not None:
                cgroups.sweep(r.job_id for r in self._jobs.values() if r.state == "running")
        empty_trash(self.jobs_dir, left_behind=True)
        self._spares = Spares(self.jobs_dir)
        try:
            launcher().start()
        except OSError as exc:  # the first job tries again, and fails to start saying why if it still cannot
            log.warning("cannot start the job launcher: %s", exc)
        self._thread = threading.Thread(target=self._watch, name="nanum-executor", daemon=True)
        self._thread.start()

    # --- what the agent calls -------------------------------------------------------------------------------

    def start(self, launch: JobLaunch, *, allow_root: bool = False) -> JobStatus:
        """Start `launch` unless this executor already holds that job (`start_all` of one)."""
        return self.start_all([launch], allow_root=allow_root)[0]

    def start_all(self, launches: list[JobLaunch], *, allow_root: bool = False) -> list[JobStatus]:
        """Start each of `launches` that this executor does not hold yet; their statuses, in order. A job that
        cannot start, whatever the reason (a refusal, a field no system call takes, an error of the system),
        becomes `failed_to_start` with that reason, alone: the executor goes on serving the other jobs.

        Each job is asked of the launcher as soon as it is prepared, and its pid read only once the next is
        prepared: the launcher starts one job while the agent prepares the next."""
        with self._cond:
            records: list[JobRecord] = []
            asked: list[tuple[JobRecord, Spawning]] = []
            try:
                for launch in launches:
                    record = self._jobs.get(launch.job_id)
                    if record is None:
                        record = JobRecord(launch=launch, dir=self.jobs_dir / str(launch.job_id), boot_id=self._boot)
                        self._jobs[launch.job_id] = record
                        with self._failing(record):
                            record.ahead = self._spares.take(record.dir)
                            asked.append((record, self._launch(record, allow_root)))
                        if record.state == "failed_to_start":
                            self._changed()
                    records.append(record)
            finally:  # every job asked of the launcher is held, whatever stopped the others
                for record, spawning in asked:
                    with self._failing(record):
                        self._launched(record, spawning)
                    self._changed()
            return [record.status() for record in records]

    @contextlib.contextmanager
    def _failing(self, record: JobRecord) -> Iterator[None]:
        """Whatever stops the job from starting makes it `failed_to_start`, saying why."""
        try:
            yield
        except Refused as exc:
            failed_to_start(record, str(exc))
        except Exception as exc:  # one job's bad launch must not stop the agent
            log.exception("job %d could not be started", record.job_id)
            fault = isinstance(exc, OSError) and exc.errno in NODE_FAULTS
            failed_to_start(record, f"the agent could not start the job: {_error_text(exc)}", node_fault=fault)

    def stop(self, job_id: int, grace_s: float | None = None, reason: str = "stopped") -> None:
        """SIGTERM the job's process group now and SIGKILL it `grace_s` later (default: the grace its launch
        carries, which is its lab's) if it is still there."""
        with self._cond:
            record = self._jobs.get(job_id)
            if record is None or record.state != "running":
                return
            if grace_s is None:
                grace_s = record.launch.grace_s
            if record.stop_reason is None:
                self._terminate(record, reason, grace_s)
            elif record.kill_at is not None and time.time() + grace_s < record.kill_at:
                record.kill_at = time.time() + grace_s
                _keep(record, "its shorter grace")
        self._exits.wake()

    def fence(self, expires: float) -> list[int]:
        """The lease ran out at `expires` (boottime): stop every running job, SIGKILL once its grace after
        `expires` has passed (at once if that is past), and mark it fenced. Returns the jobs stopped."""
        now = fence.boottime()
        with self._cond:
            running = [r for r in self._jobs.values() if r.state == "running"]
            for record in running:
                with contextlib.suppress(OSError):
                    Path(record.fenced_path).touch()
        for record in running:
            self.stop(record.job_id, max(0.0, expires + record.launch.grace_s - now), reason="fenced")
        return [r.job_id for r in running]

    def forget(self, job_id: int) -> bool:
        """Drop an ended job and its files (the server has its status and log). Running jobs are kept."""
        with self._cond:
            record = self._jobs.get(job_id)
            if record is None or record.state in ("starting", "running"):
                return False
            del self._jobs[job_id]
        # Renaming is one quick call; the watcher thread deletes the files off the agent's critical path.
        discard(self.jobs_dir, record.dir, job_id)
        self._trash = True
        self._exits.wake()
        return True

    def statuses(self) -> list[JobStatus]:
        with self._cond:
            return [r.status() for r in self._jobs.values()]

    def status(self, job_id: int) -> JobStatus | None:
        with self._cond:
            record = self._jobs.get(job_id)
            return record.status() if record else None

    def running(self) -> list[tuple[JobRecord, int | None, float | None]]:
        """(record, pid, start time) of every running job, for the monitor."""
        with self._cond:
            return [(r, r.pid, r.started_at) for r in self._jobs.values() if r.state == "running"]

    def held(self) -> dict[int, str]:
        """Job id → state for every job held."""
        with self._cond:
            return {i: r.state for i, r in self._jobs.items()}

    def read_log(self, job_id: int, offset: int, limit: int) -> tuple[str, int]:
        """Up to `limit` bytes of the job's log from `offset` as (text, bytes consumed)."""
        with self._cond:
            record = self._jobs.get(job_id)
            if record is None:
                return "", 0
            path, final = record.log_path, record.state in ("exited", "failed_to_start")
            end = record.launch.max_output_bytes
        return read_log(path, offset, limit, final=final, end=end)

    def log_size(self, job_id: int) -> int:
        with self._cond:
            record = self._jobs.get(job_id)
            return record.log_size() if record else 0

    def wait(self, job_id: int, timeout: float | None = None) -> JobStatus | None:
        """Block until the job is no longer running (for tests and tools); its status, or None on timeout."""
        with self._cond:
            ended = self._cond.wait_for(
                lambda: job_id in self._jobs and self._jobs[job_id].state not in ("starting", "running"),
                timeout,
            )
            return self._jobs[job_id].status() if ended else None

    def close(self) -> None:
        """Stop watching. Running jobs keep running; a new Executor over the same directory re-adopts them."""
        with self._cond:
            self._closed = True
        self._exits.wake()
        self._thread.join()
        self._spares.close()
        self._exits.close()
        if self._cgroups is not None:
            self._cgroups.close()

    # --- starting -------------------------------------------------------------------------------------------

    def _launch(self, record: JobRecord, allow_root: bool) -> Spawning:
        """Prepare the job's files, account and cgroup, and ask the launcher to start it (`_launched` reads the
        answer)."""
        launch = record.launch
        check_fields(launch)
        if self._checkpoint_root is not None and launch.checkpoint_dir:
            launch.checkpoint_dir = str(self._checkpoint_root / str(launch.job_id))
        account = job_account(launch.unix_user, node=self.node, allow_root=allow_root, agent=self._agent)
        switch = account.uid != self._agent.uid
        if switch:
            refuse_unrunnable(launch)
        prepare(record, account, node=self.node, switch_user=switch)
        env = job_env(launch, record, account, switch_user=switch)
        if in_container(launch):  # the runtime starts as the agent; the job runs as its user inside
            command = container_command(launch, env, account, self._containers, node=self.node,
                                        env_file=record.dir / "container.env", setpriv=self._setpriv)
            account, env, switch = self._agent, runtime_env(), False
            if launch.kind == "shell":
                command, env = relayed(command, launch, env)
        else:
            command = host_command(launch, env, self.node)
        enter = self._make_cgroup(launch)
        # Recorded before the process exists: an agent killed between the spawn and the record below finds the job
        # again when it starts (`_adopt_starting`) instead of starting it a second time.
        record.started_at = time.time()
        try:
            record.save()
            return spawn(record, account, env, switch_user=switch, cgroup_files=enter, command=command,
                         cwd="/" if in_container(launch) else None)
        except BaseException:
            record.started_at = None
            self._end_cgroup(record)
            raise

    def _launched(self, record: JobRecord, spawning: Spawning) -> None:
        """Read the launcher's answer for the job asked by `_launch`, and hold the process it started."""
        try:
            pid = spawning.pid()
        except BaseException:
            record.started_at = None
            self._end_cgroup(record)
            raise
        try:
            record.pid, record.start_ticks = pid, procs.start_ticks(pid)
            record.state = "running"
            record.save()
            self._watch_pid(record)
        except BaseException:  # a job the agent cannot keep track of must not run on unseen
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            launcher().returncode(pid)
            record.pid = record.start_ticks = record.started_at = None
            self._end_cgroup(record)
            raise

    def _make_cgroup(self, launch: JobLaunch) -> list[str]:
        """The job's fresh cgroup (the files its first process enters it by), where the node enforces limits."""
        if self._cgroups is None:
            return []
        try:
            return self._cgroups.create(launch.job_id, cpus=launch.cpus, memory_mb=launch.memory_mb)
        except OSError as exc:
            raise Refused(f"cannot create its cgroup on node {self.node}: {exc.strerror}: {exc.filename}") from None

    def _watch_pid(self, record: JobRecord) -> None:
        assert record.pid is not None
        self._exits.watch(record.job_id, record.pid)

    # --- adopting after a restart ---------------------------------------------------------------------------

    def _adopt(self) -> None:
        for job_dir in sorted(self.jobs_dir.iterdir(), key=lambda p: p.name):
            record = JobRecord.load(job_dir) if job_dir.name.isdigit() else None
            if record is None:
                continue
            self._jobs[record.job_id] = record
            if record.state == "starting":
                self._adopt_starting(record)
            elif record.state == "running":
                self._adopt_running(record)

    def _adopt_starting(self, record: JobRecord) -> None:
        """The agent stopped while it was starting the job, maybe after its process was spawned but before its pid
        was recorded. That process, the waiter, is found by the exit file it holds open and adopted; a job that has
        ended meanwhile is read from that file. Otherwise it never ran: it is forgotten, and starts when the server's
        list of the node's jobs next names it, as a job the agent had not recorded at all."""
        pid = procs.holding(record.exit_path)
        if pid is not None:
            record.pid, record.start_ticks, record.state = pid, procs.start_ticks(pid), "running"
            record.save()
            self._adopt_running(record)
        elif read_exit_file(record.exit_path) is not None or read_workdir_failure(record.exit_path) is not None:
            record.state = "running"
            self._finish(record)
        else:
            del self._jobs[record.job_id]
            discard(self.jobs_dir, record.dir, record.job_id)  # deleted with the trash, as the executor starts

    def _adopt_running(self, record: JobRecord) -> None:
        assert record.pid is not None
        same_boot = record.boot_id == self._boot
        if same_boot and procs.is_alive(record.pid, record.start_ticks):
            self._watch_pid(record)
            # The pidfd was opened after the check: make sure it is still the same process.
            if procs.is_alive(record.pid, record.start_ticks):
                log.info("re-adopted job %d (pid %d)", record.job_id, record.pid)
                return
        self._finish(record, lost=None if same_boot else "the node restarted while the job was running")

    # --- the watcher thread ---------------------------------------------------------------------------------

    def _watch(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                timeout = self._sleep_time(time.time())
            ready = self._exits.wait(timeout)
            with self._cond:
                for job_id in self._exits.ended(ready):
                    self._finish(self._jobs[job_id])
                self._poll_fallback()
                self._enforce(time.time())
            if self._trash:
                self._empty_trash()

    def _empty_trash(self) -> None:
        self._trash = False
        empty_trash(self.jobs_dir, recycled=self._spares.recycled)

    def _sleep_time(self, now: float) -> float:
        if self._exits.polled:
            return POLL_S
        running = [r for r in self._jobs.values() if r.state == "running"]
        due = [t for r in running if (t := self._next_due(r)) is not None]
        if any(r.launch.max_output_bytes is not None and r.stop_reason is None for r in running):
            due.append(self._output_checked + OUTPUT_CHECK_S)
        return max(0.0, min([MAX_SLEEP_S, *(t - now for t in due)]))

    @staticmethod
    def _next_due(record: JobRecord) -> float | None:
        if record.stop_reason is None:
            return record.deadline
        return None if record.killed else record.kill_at

    def _poll_fallback(self) -> None:
        for job_id in list(self._exits.polled):
            record = self._jobs[job_id]
            if not procs.is_alive(record.pid or 0, record.start_ticks):
                self._finish(record)

    def _enforce(self, now: float) -> None:
        measure = now - self._output_checked >= OUTPUT_CHECK_S
        if measure:
            self._output_checked = now
        for record in list(self._jobs.values()):
            if record.state != "running":
                continue
            cap = record.launch.max_output_bytes
            if record.stop_reason is None and record.deadline is not None and now >= record.deadline:
                self._terminate(record, "timeout", record.launch.grace_s)
            elif record.stop_reason is None and measure and cap is not None and record.output_size() > cap:
                log.info("job %d: wrote more than %d bytes of output; stopping it", record.job_id, cap)
                self._terminate(record, "output", min(record.launch.grace_s, OUTPUT_GRACE_S))
            elif record.stop_reason and not record.killed and record.kill_at is not None and now >= record.kill_at:
                record.killed = True
                _keep(record, "its SIGKILL")
                self._signal_group(record, signal.SIGKILL)

    # --- stopping and ending --------------------------------------------------------------------------------

    def _terminate(self, record: JobRecord, reason: str, grace_s: float) -> None:
        now = time.time()
        try:
            Path(record.preempt_path).touch(mode=0o644)
        except OSError as exc:
            log.warning("job %d: cannot create %s: %s", record.job_id, record.preempt_path, exc)
        record.stop_reason, record.term_at, record.kill_at = reason, now, now + max(0.0, grace_s)
        _keep(record, "its stop")
        if in_container(record.launch):
            terminate_container(record.launch, self._containers, self.node, record.kill_at,
                                lambda: record.state == "running")
        else:
            self._signal_group(record, signal.SIGTERM)

    def _signal_group(self, record: JobRecord, sig: signal.Signals) -> None:
        if record.pid is None or not procs.is_alive(record.pid, record.start_ticks):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(record.pid, sig)

    def _finish(self, record: JobRecord, lost: str | None = None) -> None:
        """Record how the job ended; kill what it left in its process group; learn how its waiter ended, where
        this process's launcher started it."""
        pid = record.pid or 0
        self._exits.unwatch(record.job_id)
        if pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        code, returncode = read_exit_file(record.exit_path), None
        if pid and code is None:  # the waiter wrote no status: how it ended tells (a SIGKILL, the OOM killer)
            returncode = launcher().returncode(pid)
        elif pid:
            launcher().discard(pid)
        record.fenced = os.path.exists(record.fenced_path)
        set_result(record, code, returncode, lost)
        if in_container(record.launch):
            why = container_ended(record.launch, self._containers, self.node, record.exit_code)
            record.reason = why or record.reason
        self._end_cgroup(record)
        record.state, record.ended_at = "exited", time.time()
        why = read_workdir_failure(record.exit_path)
        if why is not None:  # the waiter, as the job's user, could not enter the working directory
            record.state, record.reason = "failed_to_start", workdir_failure(record, why)
            record.exit_code = record.signal = None
        _keep(record, "its end")
        log.info("job %d ended: %s", record.job_id, describe_end(record))
        self._changed()

    def _end_cgroup(self, record: JobRecord) -> None:
        """Remove the job's cgroup; a job its memory limit killed says so."""
        if self._cgroups is not None and self._cgroups.finish(record.job_id, sigkilled=record.signal == signal.SIGKILL):
            record.reason = oom_reason(record.launch.memory_mb)

    def _changed(self) -> None:
        self.version += 1
        self._cond.notify_all()
        if self._on_change is not None:
            self._on_change()


def _keep(record: JobRecord, what: str) -> None:
    """Save `record` where the job goes on whether or not that can be done (a stop, an end): a full disk must not
    stop the thread that watches every job. The job is reported from memory; an agent started anew reads its record
    as it last was."""
    try:
        record.save()
    except OSError as exc:
        log.warning("job %d: cannot record %s in %s: %s", record.job_id, what, record.dir, exc)


def _error_text(exc: Exception) -> str:
    """An error as a user reads it: the system's words and the file, not Python's `[Errno 28]`."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror + (f": {exc.filename}" if exc.filename else "")
    return str(exc)
