"""STATE/jobs/, where the executor keeps a directory per job it holds: open to the jobs' users where the agent
runs as root, a fresh directory for each new job, and a forgotten job's directory removed off the agent's path.

Forgetting a job renames its directory to `.trash-*` (one quick call, while the agent waits); the executor's
watcher thread deletes those later, and any left by an agent that stopped first when the next one starts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from pathlib import Path

__all__ = ["discard", "empty_trash", "make_jobs_dir", "new_job_dir"]

log = logging.getLogger("nanum.agent")


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


def new_job_dir(job_dir: Path) -> None:
    shutil.rmtree(job_dir, ignore_errors=True)
    job_dir.mkdir(mode=0o711)


def discard(jobs_dir: Path, job_dir: Path, job_id: int) -> None:
    """Move a forgotten job's directory out of the way, for `empty_trash` to delete."""
    with contextlib.suppress(OSError):
        job_dir.rename(jobs_dir / f".trash-{job_id}-{time.monotonic_ns()}")


def empty_trash(jobs_dir: Path) -> None:
    with os.scandir(jobs_dir) as entries:
        trash = [entry.path for entry in entries if entry.name.startswith(".trash-")]
    for path in trash:
        _remove(path)


def _remove(path: str) -> None:
    """Delete a job's directory. It holds files only (the agent's, and the job's log and activity file, which its
    user owns but cannot add to: the directory is the agent's), unlinked through the directory's descriptor at a
    third of `shutil.rmtree`'s cost; anything else (a directory, say) goes through `rmtree`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            for name in os.listdir(fd):
                os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)
        os.rmdir(path)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
