"""Checkpoint directories: what a job saved, and removing them a retention period after the job ended.

Each job's agent gives it `CHECKPOINT_ROOT/<job id>` (0700, its owner's) as `$NANUM_CHECKPOINT_DIR`; with the
root on shared storage a requeued job finds its files on whichever node runs it next. The server reads the
same root (`nanum up --checkpoint-root`) to list a job's files for its owner (`nanum checkpoints ID`), and its
upkeep removes the directories of jobs that ended more than `checkpoint_retention_s` ago.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from pathlib import Path

from sqlalchemy import select

from nanum.server.callers import Caller
from nanum.server.context import ServerContext
from nanum.server.environment_schemas import CheckpointFile, CheckpointsOut
from nanum.server.errors import Forbidden, NotFound
from nanum.server.job_schemas import FINISHED_STATES
from nanum.server.schemas import iso
from nanum.store import JobRow

__all__ = ["list_files", "prune"]

log = logging.getLogger("nanum.server")

#: At most this many files are listed (the largest directories are model zoos, not checkpoints).
MAX_FILES = 1000


def list_files(ctx: ServerContext, caller: Caller, job_id: int) -> CheckpointsOut:
    """The files in the job's checkpoint directory with their sizes and times (its owner, lab managers, admins)."""
    with ctx.db.read() as s:
        job = s.execute(select(JobRow.user_id, JobRow.lab_id).where(JobRow.id == job_id)).first()
    if job is None:
        raise NotFound(f"no job {job_id}")
    if not caller.may_manage(job.user_id, job.lab_id):
        raise Forbidden(f"job {job_id} belongs to another user; only its owner, a manager of its lab or an admin may "
                        "list its checkpoints")
    root = ctx.settings.checkpoints_dir / str(job_id)
    files: list[CheckpointFile] = []
    for dirpath, dirnames, filenames in os.walk(root):  # os.walk does not follow links to directories
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            try:
                info = path.lstat()
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and len(files) < MAX_FILES:
                files.append(CheckpointFile(path=str(path.relative_to(root)), size=info.st_size,
                                            modified=iso(info.st_mtime)))
    return CheckpointsOut(job_id=job_id, directory=str(root), exists=root.is_dir(), files=files)


def prune(ctx: ServerContext, now: float) -> list[int]:
    """Remove the checkpoint directories of jobs that ended more than the retention period ago; their ids."""
    root = ctx.settings.checkpoints_dir
    try:
        held = [int(p.name) for p in root.iterdir() if p.name.isdigit()]
    except OSError:
        return []
    if not held:
        return []
    cutoff = now - ctx.settings.checkpoint_retention_s
    with ctx.db.read() as s:
        ended = set(s.scalars(select(JobRow.id).where(
            JobRow.id.in_(held), JobRow.state.in_(FINISHED_STATES), JobRow.end_time < cutoff)))
    gone = sorted(ended)
    for job_id in gone:
        shutil.rmtree(root / str(job_id), ignore_errors=True)
        log.info("removed the checkpoint directory of job %d (ended over the retention period ago)", job_id)
    return gone
