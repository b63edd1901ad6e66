"""STATE/jobs/, where the executor keeps a directory per job it holds: open to the jobs' users where the agent
runs as root, a directory made ready ahead for each new job, and a forgotten job's directory cleared off the
agent's path.

A job's start needs its directory and files: its log and activity file, which are the job's (its processes write
them, and may keep them open after it ends), its exit file, which only the agent and the job's waiter open, and its
record's two, which only the agent ever opens: `job.json` and a blank that `JobRecord.save` writes and renames over
it, keeping the old record's file as the next blank. Creating a file or directory can cost the kernel far more than
writing one: 380-650 µs of system time each at times on the ext4 of the machines nanum is measured on, against
15-40 µs to truncate and write an existing one or to rename one. Where ext4 runs without a journal, each new inode
is looked for past every inode freed in its block group in the last minutes (up to six), so that a node starting
and forgetting short jobs pays more per file the more it has freed: up to a millisecond, a fifth of its agent's
time in a queue of 1,000 short jobs.

So `Spares` makes a few directories ahead, off the start's path, each with those files empty: a start renames one
into place (`Spares.take`), and forgetting a job frees as few inodes as it can. A spare is made by the agent before
any job is known and holds only the agent's own empty files. The job's own files (log, activity) are always new: a
job never gets a file another job's processes could still hold open. The directory, the exit file and the record's
two are a forgotten job's, emptied (`Recycled`): none of them is ever held by a job's own processes (the directory
is the agent's, and only it writes there), so none costs a new inode per job.

Forgetting a job renames its directory to `.trash-*` (one quick call, while the agent waits); the executor's
watcher thread clears those later, keeping their directories and agent-only files for the spares and deleting the
rest, and deletes any left by an agent that stopped first when the next one starts.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["BLANK", "JOB_FILES", "KEPT_FILES", "RECORD", "RECORD_FILES", "RECYCLED", "SPARES", "Recycled", "Spares",
           "discard", "empty_trash", "make_jobs_dir"]

log = logging.getLogger("nanum.agent")

#: Directories kept made ahead: a node's whole batch of starts (one per GPU of an 8-GPU node) finds one each.
SPARES = 8
#: The job's record, and the file each save writes before renaming it over the record (`JobRecord.save`).
RECORD, BLANK = "job.json", ".blank"
#: The files of a spare that only the agent opens, the record's: made of forgotten jobs' where there are some.
RECORD_FILES = (RECORD, BLANK)
#: The files of a job's directory that the agent makes for the job, with their modes: made ahead in a spare (beside
#: its record's), and by `nanum.agent.launch.prepare` where missing. One table for both: an existing file keeps the
#: mode it was made with. The log and activity file are always new (the job's processes write them); the exit file
#: may be a forgotten job's (`KEPT_FILES`).
JOB_FILES = {"output.log": 0o600, "exit": 0o600, "activity": 0o644}
#: The files of a forgotten job that a later spare gets, emptied: once it ended, none is held by any process (the exit
#: file only ever by its waiter, which does not pass it on to the job's command).
KEPT_FILES = (*RECORD_FILES, "exit")
JOB_DIR_MODE = 0o711
#: Where forgotten jobs' directories and kept files wait for a spare, and how many of each it keeps (the rest are
#: deleted).
RECYCLED, RECYCLED_MAX = ".recycled", 4 * SPARES
#: A spare's files and their modes: the job's and its record's.
_SPARE_FILES = tuple({**JOB_FILES, **dict.fromkeys(RECORD_FILES, 0o600)}.items())
#: Spares are made again once no start took one for this long (seconds), not beside the starts themselves.
REFILL_AFTER_S = 0.02


def make_jobs_dir(jobs_dir: Path, agent_uid: int) -> None:
    jobs_dir.mkdir(parents=True, exist_ok=True)
    if agent_uid == 0:
        # Jobs of other users must reach their preempt file (STATE/jobs/<id>/preempt) by path.
        for directory in (jobs_dir.parent, jobs_dir):
            os.chmod(directory, os.stat(directory).st_mode | 0o111)
        closed = [d for d in jobs_dir.resolve().parents if not os.stat(d).st_mode & 0o001]
        if closed:
            log.warning(
                "jobs of other users cannot reach their NANUM_PREEMPT_FILE: %s is closed to them; "
                "use a --state-dir such as /var/lib/nanum/agent",
                closed[0],
            )


class Recycled:
    """The directories and kept files (`KEPT_FILES`) of forgotten jobs (in STATE/jobs/.recycled/), for new spares,
    emptied.

    Only what is the agent's own is kept: a regular file, 0600, with no other name, and an empty directory no one
    else may write to. Made anew by each agent: an earlier agent's is deleted with its spares."""

    def __init__(self, jobs_dir: Path) -> None:
        self.dir = os.path.join(jobs_dir, RECYCLED)  # text, as every path here: a `Path` costs more to make
        if os.path.lexists(self.dir):  # an earlier agent's, where it was not deleted with its spares
            _remove(self.dir)
        os.mkdir(self.dir, 0o700)
        self._uid = os.geteuid()
        self._names = itertools.count()
        self._kept: list[str] = []
        self._dirs: list[str] = []
        self._lock = threading.Lock()

    def keep(self, path: str) -> None:
        """Keep the file at `path` (a forgotten job's kept file) if it is one to keep and there is room."""
        self._keep(path, self._kept, lambda info: (stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
                                                   and info.st_nlink == 1))

    def keep_dir(self, path: str) -> bool:
        """Keep the directory at `path` (a forgotten job's, its files deleted) if it is one to keep and there is
        room; False when it was not kept."""
        return self._keep(path, self._dirs, lambda info: stat.S_ISDIR(info.st_mode) and not info.st_mode & 0o7022)

    def take(self, path: str) -> bool:
        """Put a kept file, emptied, at `path`; False when none is kept."""
        if not self._take(self._kept, path):
            return False
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC))
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(path)
            return False
        return True

    def take_dir(self, path: str) -> bool:
        """Put a kept directory at `path`, which must not exist; False when none is kept."""
        if not self._take(self._dirs, path):
            return False
        try:
            os.chmod(path, JOB_DIR_MODE)
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            return False
        return True

    def _keep(self, path: str, pool: list[str], fits: Callable[[os.stat_result], bool]) -> bool:
        with self._lock:
            if len(pool) >= RECYCLED_MAX:
                return False
            name = str(next(self._names))
        try:
            info = os.lstat(path)
            if info.st_uid != self._uid or not fits(info):
                return False
            os.rename(path, f"{self.dir}/{name}")
        except OSError:
            return False
        with self._lock:
            pool.append(name)
        return True

    def _take(self, pool: list[str], path: str) -> bool:
        with self._lock:
            if not pool:
                return False
            name = pool.pop()
        try:
            os.rename(f"{self.dir}/{name}", path)
        except OSError:
            return False
        return True


class Spares:
    """Job directories made ahead by a thread of their own, `SPARES` at a time (see the module docstring).

    Spares are named `.spare-N` once complete (`.making-N` while being made); those an earlier agent left are
    deleted with the trash, not used: they may belong to another account than this agent's."""

    def __init__(self, jobs_dir: Path, count: int = SPARES) -> None:
        self.jobs_dir, self.count = jobs_dir, count
        self.recycled = Recycled(jobs_dir)
        self._ready: list[str] = []
        self._names = itertools.count()
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        #: When a start last took a spare (monotonic): the thread makes more once none has for `REFILL_AFTER_S`.
        self._taken_at = 0.0
        self._closed = False
        self._wanted.set()
        self._thread = threading.Thread(target=self._run, name="nanum-spares", daemon=True)
        self._thread.start()

    def take(self, job_dir: Path) -> bool:
        """Make `job_dir` the new job's directory: a spare renamed into place, or (none ready) a new one. Returns
        whether it holds its record's files (a new one holds none)."""
        shutil.rmtree(job_dir, ignore_errors=True)
        with self._lock:
            spare = self._ready.pop() if self._ready else None
        self._taken_at = time.monotonic()
        self._wanted.set()  # wakes the thread where it waits for work; while it waits out the starts, costs nothing
        if spare is not None:
            with contextlib.suppress(OSError):
                os.rename(spare, job_dir)
                return True
        job_dir.mkdir(mode=JOB_DIR_MODE)
        return False

    def ready(self) -> int:
        with self._lock:
            return len(self._ready)

    def close(self) -> None:
        self._closed = True
        self._wanted.set()
        self._thread.join()

    def _run(self) -> None:
        # `close` is looked at before each wait: its wake may be cleared below, after the look that would see it.
        while not self._closed:
            self._wanted.wait()
            # Wait for the starts to be done: a job just asked of the launcher starts while the agent is here. By
            # the clock, not by being woken at each start: a thread woken takes the interpreter from the one
            # starting jobs, once for every start of a batch.
            while not self._closed and (left := self._taken_at + REFILL_AFTER_S - time.monotonic()) > 0:
                time.sleep(left)
            self._wanted.clear()
            while not self._closed and self.ready() < self.count:
                try:
                    spare = self._make()
                except OSError as exc:  # a start makes its directory itself meanwhile
                    log.warning("cannot make a job directory ahead in %s: %s", self.jobs_dir, exc)
                    break
                with self._lock:
                    self._ready.append(spare)

    def _make(self) -> str:
        n = next(self._names)
        making, spare = f"{self.jobs_dir}/.making-{n}", f"{self.jobs_dir}/.spare-{n}"
        if not self.recycled.take_dir(making):
            os.mkdir(making, JOB_DIR_MODE)
        made = [(name, mode) for name, mode in _SPARE_FILES
                if name not in KEPT_FILES or not self.recycled.take(f"{making}/{name}")]
        for name, mode in made:
            os.close(os.open(f"{making}/{name}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode))
        os.rename(making, spare)
        return spare


def discard(jobs_dir: Path, job_dir: Path, job_id: int) -> None:
    """Move a forgotten job's directory out of the way, for `empty_trash` to delete."""
    with contextlib.suppress(OSError):
        os.rename(job_dir, f"{jobs_dir}/.trash-{job_id}-{time.monotonic_ns()}")


def empty_trash(jobs_dir: Path, *, left_behind: bool = False, recycled: Recycled | None = None) -> None:
    """Clear the forgotten jobs' directories: their kept files and then the emptied directories go to `recycled`,
    the rest is deleted; `left_behind`: also delete the spares (and kept files) of an agent that has stopped."""
    prefixes = (".trash-", ".spare-", ".making-", RECYCLED) if left_behind else (".trash-",)
    with os.scandir(jobs_dir) as entries:
        trash = [entry.path for entry in entries if entry.name.startswith(prefixes)]
    for path in trash:
        if recycled is not None:
            for name in KEPT_FILES:
                recycled.keep(os.path.join(path, name))
        _remove(path, recycled)


def _remove(path: str, recycled: Recycled | None = None) -> None:
    """Delete a job's directory, or empty it and give it to `recycled`. It holds files only (the agent's, and the
    job's log and activity file, which its user owns but cannot add to: the directory is the agent's), unlinked
    through the directory's descriptor at a third of `shutil.rmtree`'s cost; anything else (a directory, say) goes
    through `rmtree`, and the directory with it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            for name in os.listdir(fd):
                os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)
        if recycled is None or not recycled.keep_dir(path):
            os.rmdir(path)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
