"""What the agent remembers about one job, on disk in STATE/jobs/<id>/ so that a restarted agent carries on.

Files in a job's directory:
- `job.json`  this record: the launch request, pid and process start time, stop requests, and the result;
- `output.log` stdout and stderr of the job;
- `exit`      written by the job's waiter (`nanum.agent.launcher`) with its exit status when the command ends, or with
              `workdir: ` and the reason when the job's user could not enter its working directory;
- `preempt`   created by the agent just before it sends SIGTERM, so the job can tell it should checkpoint;
- `activity`  touched by the job (a notebook) whenever its user is at work: idle detection reads its mtime;
- `fenced`    created just before the job is stopped for want of a lease (`nanum.agent.fence`).

A job marks a checkpoint by touching `.checkpoint` in its checkpoint directory (`nanum checkpoint` does); every
status carries that file's modification time, so the server can choose victims that lose the least work.

"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

from nanum.agent.fence import FENCED_MARK
from nanum.agent.jobsdir import BLANK, RECORD
from nanum.protocol import JobLaunch, JobStatus

__all__ = ["CHECKPOINT_MARK", "JobRecord", "read_exit_file", "read_log", "read_workdir_failure", "signal_of"]

log = logging.getLogger("nanum.agent")

State = Literal["starting", "running", "exited", "failed_to_start"]
MAX_SIGNAL = 64
WORKDIR_FAILED = "workdir: "
ENV_CD_ERROR = ": cannot change directory to "  # how a waiter of an earlier version said it, through `env -C`
#: The old record's second name while a save replaces it (`JobRecord.save`).
KEPT = ".kept"
#: The file in a job's checkpoint directory whose modification time says when it last saved its state.
CHECKPOINT_MARK = ".checkpoint"


@dataclass(slots=True)
class JobRecord:
    """A job the agent holds. Its files' paths are text (`log_path`, `exit_path`, ...): the agent builds several
    for every job it starts and ends, and a `Path` costs microseconds to make where joining text costs a tenth of
    that (pathlib was a third of the executor's Python time in 1,000 short jobs)."""

    launch: JobLaunch
    dir: Path
    state: State = "starting"
    pid: int | None = None
    start_ticks: int | None = None
    boot_id: str = ""
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    reason: str | None = None
    # A stop in progress: why, when SIGTERM went out, when SIGKILL follows, and whether it has.
    stop_reason: str | None = None
    term_at: float | None = None
    kill_at: float | None = None
    killed: bool = False
    #: Stopped because the agent's lease ran out (`nanum.agent.fence`): the server requeues rather than fails it.
    fenced: bool = False
    #: It could not start because of the node, not of its request (`nanum.agent.endings.NODE_FAULTS`).
    node_fault: bool = False
    #: `dir` was made ahead (`nanum.agent.jobsdir.Spares`): it holds the record's blank for the next save; not saved.
    ahead: bool = False
    #: `dir` as text, ending in a slash: the files' paths are this and their names.
    _in: str = field(init=False, repr=False, compare=False, default="")

    def __post_init__(self) -> None:
        self._in = os.path.join(self.dir, "")

    @property
    def job_id(self) -> int:
        return self.launch.job_id

    @property
    def log_path(self) -> str:
        return self._in + "output.log"

    @property
    def exit_path(self) -> str:
        return self._in + "exit"

    @property
    def preempt_path(self) -> str:
        return self._in + "preempt"

    @property
    def fenced_path(self) -> str:
        """Made just before the job is stopped for want of a lease (`nanum.agent.fence.FENCED_MARK`)."""
        return self._in + FENCED_MARK

    @property
    def activity_path(self) -> str:
        """Touched by a notebook (or anything) to say its user is still at work: see `nanum.agent.monitor`."""
        return self._in + "activity"

    @property
    def deadline(self) -> float | None:
        """When the time limit runs out (wall clock), if there is one."""
        if self.started_at is None or self.launch.time_limit_s is None:
            return None
        return self.started_at + self.launch.time_limit_s

    def status(self) -> JobStatus:
        state = "running" if self.state == "starting" else self.state
        return JobStatus(
            job_id=self.job_id,
            state=state,
            pid=self.pid,
            started_at=self.started_at,
            ended_at=self.ended_at,
            exit_code=self.exit_code,
            signal=self.signal,
            timed_out=self.timed_out,
            reason=self.reason,
            log_size=self.log_size(),
            checkpoint_at=self.checkpoint_at(),
            fenced=self.fenced,
            node_fault=self.node_fault,
            stopped=self.stop_reason is not None if self.state in ("exited", "failed_to_start") else None,
            run=self.launch.run or None,
            address=self.launch.env.get("NANUM_NOTEBOOK_ADDRESS") if self.launch.kind == "notebook" else None,
        )

    def checkpoint_at(self) -> float | None:
        """When the job last marked a checkpoint (`nanum checkpoint`, or touching `.checkpoint` in its
        checkpoint directory), or None."""
        if not self.launch.checkpoint_dir:
            return None
        try:
            return os.stat(os.path.join(self.launch.checkpoint_dir, CHECKPOINT_MARK)).st_mtime
        except (OSError, ValueError):  # ValueError: a path no system call takes (a null byte)
            return None

    def log_size(self) -> int:
        """The bytes of its log that are kept and sent: at most its launch's `max_output_bytes`."""
        size = self.output_size()
        cap = self.launch.max_output_bytes
        return size if cap is None or size <= cap else cap

    def output_size(self) -> int:
        """The bytes the job wrote to its log, kept or not."""
        try:
            return os.stat(self.log_path).st_size
        except OSError:
            return 0

    def save(self) -> None:
        """Write job.json atomically (a crash leaves the old or the new record, never half of one): into the blank
        of a directory made ahead, or a new file, renamed over it. In a directory made ahead the old record's file
        is kept under a second name first and becomes the next save's blank: however often a job's record is
        saved, it creates no file (see `nanum.agent.jobsdir`)."""
        # field by field: `asdict` would deep-copy the launch only to leave it out
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_SAVED}
        data["launch"] = self.launch.model_dump(mode="json")
        record = self._in + RECORD
        tmp = self._in + (BLANK if self.ahead else "job.json.tmp")
        content = json.dumps(data).encode()  # one write: `json.dump` to a file writes piece by piece
        # Written over the blank's old bytes and cut to length, not emptied first: emptying (O_TRUNC) frees its
        # blocks, and ext4 (auto_da_alloc) then allocates the new ones at the close and at the rename. A save took
        # 115 µs so, 25 µs this way.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            size = len(content)
            while content:
                content = content[os.write(fd, content):]
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
        kept = self._in + KEPT  # the old record's, while the new one replaces it
        if self.ahead:
            try:
                os.link(record, kept, follow_symlinks=False)
            except OSError:  # no old record to keep (or a name left by a crash): later saves use a new file
                self.ahead = False
        os.replace(tmp, record)
        if self.ahead:
            os.replace(kept, tmp)

    @classmethod
    def load(cls, job_dir: Path) -> JobRecord | None:
        try:
            data = json.loads((job_dir / "job.json").read_text())
            launch = JobLaunch.model_validate(data.pop("launch"))
            return cls(launch=launch, dir=job_dir, **data)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning("ignoring %s: unreadable job record (%s)", job_dir, exc)
            return None


#: The fields of a record that `save` leaves out of job.json: the launch is saved apart, the rest is this agent's.
_NOT_SAVED = ("launch", "dir", "ahead", "_in")


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def read_exit_file(path: str) -> int | None:
    """The exit status the waiter recorded, or None when it wrote nothing (it was killed, or is running)."""
    try:
        text = _read_text(path).strip()
    except OSError:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def read_workdir_failure(path: str) -> str | None:
    """When the waiter could not enter the job's working directory as its user: why, in the kernel's words
    (`Permission denied`), or '' when it could not tell; None when the exit file says nothing of the kind."""
    try:
        text = _read_text(path)
    except OSError:
        return None
    if not text.startswith(WORKDIR_FAILED):
        return None
    said = text[len(WORKDIR_FAILED) :].splitlines()
    why = said[0].strip() if said else ""
    if ENV_CD_ERROR in why:
        why = why.rsplit(": ", 1)[1].strip()
    return why if len(why) <= 100 and why.isprintable() else ""


def signal_of(code: int) -> int | None:
    """The signal a shell-style exit status 128+N stands for."""
    return code - 128 if 128 < code <= 128 + MAX_SIGNAL else None


def read_log(path: str, offset: int, limit: int, *, final: bool, end: int | None = None) -> tuple[str, int]:
    """Up to `limit` bytes of `path` from `offset`, as (text, bytes consumed), and none from `end` on (the most
    kept of a job's output).

    A multi-byte UTF-8 character cut by the end of the chunk is left for the next chunk, unless this chunk
    reaches the end of a `final` log (the job has ended) or `end`; bytes that are not UTF-8 become U+FFFD.
    """
    if end is not None and offset + limit >= end:
        limit, final = max(end - offset, 0), True
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            raw = f.read(limit)
    except OSError:
        return "", 0
    if not final or (len(raw) == limit and offset + limit != end):  # more may follow: keep a split character
        raw = raw[: len(raw) - _incomplete_tail(raw)]
    return raw.decode("utf-8", errors="replace"), len(raw)


def _incomplete_tail(raw: bytes) -> int:
    """How many bytes at the end of `raw` begin a UTF-8 character that is not complete yet."""
    for back in range(1, min(4, len(raw)) + 1):
        byte = raw[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII)
            need = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
            return back if need > back else 0
    return 0
