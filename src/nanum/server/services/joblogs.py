"""Job logs as agents ship them with heartbeats: each chunk appended where the server's copy of its run ends.

The agent counts the bytes of each run of a job's output; the server keeps every run in one file
(`$HOME/logs/<job_id>.log`, each run after a header line), and a multi-node job one file per node besides
(`nanum.server.services.nodelogs`). A chunk is appended from where the server's copy ends: bytes it holds already
are skipped, and a chunk that would leave a gap is dropped; the length the server answers tells the agent where to
send from. So an agent may send again what a request without a reply carried: appends are checked and made under
a lock on the logs directory that every server process on the machine shares.

The server keeps at most `--max-output` bytes of a run (of each node's part): agents stop a job that writes more,
but an agent of an earlier version, or a node's token in the wrong hands, could send without end and fill the
server's disk. Bytes past the cap are counted as received (the agent moves on) and dropped, once said in the log.

The report of a job's end carries its output's length on the node. Where the server holds less (the output was
more than a heartbeat carries), `<stem>.log.missing` says how many bytes are still to come, until they have:
`nanum logs` then knows to wait for them rather than show an ended job's output cut short.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from nanum.protocol import JobStatus, LogChunk
from nanum.server.context import ServerContext
from nanum.server.services import nodelogs
from nanum.store import JobRow
from nanum.units import memory_text

__all__ = ["agent_log_size", "missing_bytes", "runs_in", "runs_on", "write_logs"]

log = logging.getLogger("nanum.server")


def write_logs(ctx: ServerContext, node: str, chunks: list[LogChunk], reports: list[JobStatus],
               runs: dict[int, tuple[int, bool]] | None = None) -> dict[int, int]:
    """Append what each chunk has beyond the server's copy of this run; return each job's length this run.

    Offsets and lengths count the agent's bytes of the current run (a requeued job's log starts again at 0 on
    the agent; the server keeps every run in one file, each after a header line): a chunk covers `nbytes` of
    them even where bytes that were not UTF-8 arrived as U+FFFD. Bytes held already are skipped (`_append`), a
    chunk that would leave a gap is dropped, and the returned length tells the agent where to send from. Only
    jobs that ran on this node may write their logs. Heartbeats of one node may be handled concurrently, by
    several processes, so appends are serialised (`_locked`). `runs`: what `runs_on` would answer (covering
    every job of `chunks`), when the caller has read it already. Each of `reports` (the node's reports of its
    jobs) that is of an ended job records how much of its output is still to come (the module docstring)."""
    mentioned = {r.job_id for r in reports}
    if runs is None:
        runs = runs_on(ctx, node, {c.job_id for c in chunks} | mentioned)
    allowed = {c.job_id for c in chunks if c.job_id in runs}
    if not allowed and not mentioned & runs.keys():
        return {}
    logs = ctx.settings.logs_dir
    stems = {job_id: nodelogs.stem(job_id, node, gang) for job_id, (_, gang) in runs.items()}
    with _locked(logs):
        offsets = {job_id: _run_log_size(logs, stems[job_id], run, node) for job_id, (run, _) in runs.items()
                   if job_id in mentioned or job_id in allowed}
        for chunk in chunks:
            if chunk.job_id in allowed:
                offsets[chunk.job_id], text = _append(logs, chunk, offsets[chunk.job_id], stems[chunk.job_id],
                                                      ctx.settings.max_output_bytes)
                if runs[chunk.job_id][1] and text:  # a multi-node job: interleave too
                    nodelogs.interleave(logs, chunk.job_id, node, text, runs[chunk.job_id][0])
        for report in reports:
            if report.state != "running" and report.job_id in runs:
                _note_missing(logs / f"{stems[report.job_id]}.log.missing",
                              (report.log_size or 0) - offsets[report.job_id])
    return offsets


def _note_missing(path: Path, missing: int) -> None:
    """Say how many bytes are still to come, or that none are. Replaced whole: a reader never sees it half written
    (an empty file would read as nothing missing)."""
    if missing > 0:
        partial = path.with_name(f"{path.name}.new")
        partial.write_text(str(missing))
        os.replace(partial, path)
    else:
        path.unlink(missing_ok=True)


def missing_bytes(logs: Path, stems: list[str]) -> int:
    """How many bytes of an ended job's output its nodes hold that the server does not have yet, for the parts
    `stems` names (as `nodelogs.stem` does)."""
    total = 0
    for stem in stems:
        with contextlib.suppress(FileNotFoundError, ValueError):
            total += int((logs / f"{stem}.log.missing").read_text())
    return total


@contextlib.contextmanager
def _locked(logs: Path) -> Iterator[None]:
    """Hold the logs directory's lock: one thread of one process at a time. Where the file system takes no locks
    (an NFS mount without its lock service), only this process's threads are kept apart, and that is said once."""
    global _unlockable
    logs.mkdir(parents=True, exist_ok=True)
    with _THREADS:
        fd = os.open(logs / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as exc:
                if not _unlockable:
                    _unlockable = True
                    log.warning("cannot lock %s (%s): with several server processes (--workers), a job's "
                                "output sent twice could be kept twice; keep the nanum home on a local disk",
                                logs / ".lock", exc.strerror)
            yield
        finally:
            os.close(fd)  # releases the lock


_THREADS = threading.Lock()
_unlockable = False


#: Built once: every heartbeat that carries output asks.
_RUNS = select(JobRow.id, JobRow.allocation, JobRow.runs, JobRow.nodes).where(
    JobRow.id.in_(bindparam("ids", expanding=True)))


def runs_on(ctx: ServerContext, node: str, ids: set[int]) -> dict[int, tuple[int, bool]]:
    """Job id → (run number, whether it runs on several nodes), for those of `ids` whose current allocation is on
    `node`."""
    if not ids:
        return {}
    with ctx.db.read() as s:
        return runs_in(s, node, ids)


def runs_in(s: Session, node: str, ids: set[int]) -> dict[int, tuple[int, bool]]:
    """`runs_on`, in the caller's transaction."""
    if not ids:
        return {}
    rows = s.connection().execute(_RUNS, {"ids": sorted(ids)})
    return {job_id: (runs or 0, nodes > 1) for job_id, alloc, runs, nodes in rows
            if any(a.get("node") == node for a in alloc or ())}


def agent_log_size(logs: Path, stem: int | str) -> int:
    """How many log bytes of the job's agents (of one node's part, for a multi-node job: `nodelogs.stem`) the
    server holds, all runs: the file's size plus the recorded skew."""
    path = logs / f"{stem}.log"
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    return size + _skew(path)


def _run_log_size(logs: Path, stem: str, run: int, node: str) -> int:
    """The agent bytes of run `run` held so far. The first chunk of a later run gets a header line first."""
    base_file = logs / f"{stem}.log.run"
    total = agent_log_size(logs, stem)
    try:
        seen_run, base = (int(x) for x in base_file.read_text().split())
    except (FileNotFoundError, ValueError):
        seen_run, base = (run, 0)
        if total and run > 1:
            seen_run = -1
    if seen_run != run:
        (logs / f"{stem}.log.missing").unlink(missing_ok=True)  # an earlier run's
        if total:
            header = f"\n--- run {run} on {node} ---\n".encode()
            with open(logs / f"{stem}.log", "ab") as f:
                f.write(header)
            total += len(header)
        base_file.write_text(f"{run} {total}")
        base = total
    return total - base


def _skew(path: Path) -> int:
    try:
        return int((path.parent / f"{path.name}.skew").read_text())
    except (FileNotFoundError, ValueError):
        return 0


def _append(logs: Path, chunk: LogChunk, have: int, stem: str, cap: int) -> tuple[int, str]:
    """Append what `chunk` has beyond `have` (this run's bytes held) to `stem`.log, at most `cap` bytes of the run
    (the module docstring); return the new length and the text appended. A chunk that starts after `have` would
    leave a gap, and is dropped; one that starts before it (sent again: its first request got no reply) is cut to
    its new bytes, where its text is its bytes (a chunk that carried bytes that were not UTF-8 cannot be cut: it
    is dropped, and the agent sends from `have`)."""
    text, data = chunk.data, chunk.data.encode()
    nbytes = len(data) if chunk.nbytes is None else chunk.nbytes
    if chunk.offset < have < chunk.offset + nbytes and nbytes == len(data):
        data = data[have - chunk.offset :]
        text, nbytes = data.decode(errors="replace"), len(data)
    elif chunk.offset != have or nbytes <= 0:
        return have, ""
    if have + nbytes > cap:
        data = data[: max(cap - have, 0)]
        if have <= cap:  # the chunk that passes the cap: said once
            data += _past_cap(cap).encode()
        text = data.decode(errors="replace")
    path = logs / f"{stem}.log"
    with open(path, "ab") as f:
        f.write(data)
    if nbytes != len(data):
        (logs / f"{path.name}.skew").write_text(str(_skew(path) + nbytes - len(data)))
    return have + nbytes, text


def _past_cap(cap: int) -> str:
    return (f"\n[nanum: this run's output passed {memory_text(cap // (1 << 20))}, the most the server keeps "
            "(its --max-output); the rest was not kept]\n")
