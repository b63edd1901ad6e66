"""How a job's end is recorded and put in words: its exit code and signal from what the executor saw, and the
reason a user reads in `nanum show` (it failed to start, a time limit, a lost lease, a launcher that failed, an
agent that was not running).

They work on a job's record alone, apart from the process handling that leads to them (`nanum.agent.executor`),
so what a user is told can be read, and changed, in one place.
"""

from __future__ import annotations

import errno
import logging
import signal
import time

from nanum.agent.jobrecord import JobRecord, signal_of
from nanum.units import memory_text

__all__ = ["NODE_FAULTS", "describe_end", "failed_to_start", "set_result", "workdir_failure"]

log = logging.getLogger("nanum.agent")


#: What a failure to start says of the node rather than of the job: its disk full or read-only, its processes,
#: open files or memory exhausted, its disk failing. Every job sent there would fail the same way.
NODE_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EAGAIN, errno.ENOMEM, errno.EMFILE,
                         errno.ENFILE})


def failed_to_start(record: JobRecord, reason: str, *, node_fault: bool = False) -> None:
    """Record that the job could not start, and why (a refusal, a field no system call takes, an error), and
    whether that was the node's fault (`NODE_FAULTS`)."""
    record.state, record.reason, record.ended_at = "failed_to_start", reason, time.time()
    record.node_fault = node_fault
    try:
        record.save()
    except OSError as exc:  # still reported from memory; a restarted agent will not know the job
        log.warning("job %d: cannot record its failure to start in %s: %s", record.job_id, record.dir, exc)
    log.info("job %d failed to start: %s", record.job_id, reason)


def set_result(record: JobRecord, code: int | None, returncode: int | None, lost: str | None) -> None:
    """Set the job's exit code, signal and reason from its exit file's `code`, its process's `returncode` (when
    it was the agent's child) and `lost` (why neither is known, when that is known)."""
    launcher_failed = False
    if code is None and returncode is not None and returncode < 0:
        code = 128 - returncode
    elif code is None and record.killed:
        code = 128 + signal.SIGKILL
    elif code is None and returncode:
        code, launcher_failed = returncode, True
    record.exit_code = code
    record.signal = signal_of(code) if code is not None else None
    record.timed_out = record.stop_reason == "timeout"
    if record.timed_out:
        record.reason = f"time limit of {_duration(record.launch.time_limit_s or 0)} reached"
    elif record.stop_reason == "output":
        kept = memory_text((record.launch.max_output_bytes or 0) >> 20)  # the server gives it in MiB
        record.reason = (f"its output passed {kept}, the most a job may write (the server's --max-output): it was "
                         f"stopped, and its first {kept} kept; write large output to a file of your own")
    elif record.fenced:
        record.reason = "stopped on its node: the agent heard nothing from the server for longer than the lease"
    elif launcher_failed:
        record.reason = "the job ended before its command could run; its log says why"
    elif code is None:
        record.reason = lost or ("its exit status is unknown: its node could not record it (the agent was not "
                                 "running, or the node's disk was full)")


def describe_end(record: JobRecord) -> str:
    """How the job ended, for the agent's log: `exit code 137 (signal 9); time limit of 2h reached`."""
    if record.signal is not None:
        text = f"exit code {record.exit_code} (signal {record.signal})"
    else:
        text = f"exit code {record.exit_code}" if record.exit_code is not None else "exit status unknown"
    return f"{text}; {record.reason}" if record.reason else text


def workdir_failure(record: JobRecord, why: str) -> str:
    """The reason a job failed to start when its user could not enter its working directory."""
    launch = record.launch
    text = f"cannot enter working directory {launch.workdir} as {launch.unix_user}"
    return f"{text}: {why}" if why else f"{text}; check that it exists and that {launch.unix_user} may enter it"


def _duration(seconds: float) -> str:
    """`90` → `1m 30s`, `7200` → `2h`, `0.5` → `0.5s`."""
    if seconds < 60:
        return f"{seconds:g}s"
    s = round(seconds)
    parts = [(s // 86400, "d"), (s % 86400 // 3600, "h"), (s % 3600 // 60, "m"), (s % 60, "s")]
    return " ".join(f"{n}{u}" for n, u in parts if n) or "0s"
