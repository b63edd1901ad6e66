"""Shipping jobs' output to the server: which bytes of each job's log the server holds, which to send next, and
when an ended job's files may go.

Each heartbeat carries at most a chunk per job within a byte budget, ended jobs first (their log is what keeps
them on the node). What a reply says the server holds wins; where it says nothing, what went out in that round
counts as held. A request that got no reply (dropped for newer news) counts for nothing: the next heartbeat sends
again from what the server last said it holds, and the server skips the bytes it has already, so the heartbeat
that reports a job's end carries the rest of its output. An ended job the server acknowledged is forgotten (its
files removed) once the server holds its whole log.
"""

from __future__ import annotations

from nanum.agent.executor import Executor
from nanum.protocol import HeartbeatReply, JobStatus, LogChunk

__all__ = ["LogShipping"]


class LogShipping:
    def __init__(self, chunk_bytes: int, bytes_per_heartbeat: int) -> None:
        self.chunk_bytes = chunk_bytes
        self.bytes_per_heartbeat = bytes_per_heartbeat
        self.offsets: dict[int, int] = {}  # log bytes the server holds, per job (None: not known yet)
        self.acked: set[int] = set()

    def chunks(self, executor: Executor, statuses: list[JobStatus]) -> list[LogChunk]:
        """New output since what the server holds: ended jobs first, at most a chunk per job and a budget."""
        budget, chunks = self.bytes_per_heartbeat, []
        for status in sorted(statuses, key=lambda s: (s.state == "running", s.job_id)):
            offset = self.offsets.get(status.job_id)
            if offset is None or (status.log_size or 0) <= offset or budget <= 0:
                continue
            text, nbytes = executor.read_log(status.job_id, offset, min(self.chunk_bytes, budget))
            if nbytes:
                chunks.append(LogChunk(job_id=status.job_id, offset=offset, data=text, nbytes=nbytes))
                budget -= nbytes
        return chunks

    def unsent(self, statuses: list[JobStatus], chunks: list[LogChunk]) -> list[JobStatus]:
        """The jobs with output that neither the server holds nor `chunks` carry."""
        sent = {c.job_id: c.offset + (c.nbytes or 0) for c in chunks}
        return [s for s in statuses if (s.log_size or 0) > sent.get(s.job_id, self.offsets.get(s.job_id, 0))]

    def update(self, executor: Executor, reply: HeartbeatReply, sent: list[LogChunk]) -> None:
        """The server's offsets win; where it gives none, what it accepted in this round counts as held."""
        ends = {c.job_id: c.offset + (c.nbytes or 0) for c in sent}
        for job_id in executor.held():
            if job_id in reply.log_offsets:
                self.offsets[job_id] = reply.log_offsets[job_id]
            elif job_id in ends:
                self.offsets[job_id] = ends[job_id]
            else:
                self.offsets.setdefault(job_id, 0)
        self.acked.update(reply.ack)

    def forget_acked(self, executor: Executor) -> list[tuple[int, int | None]]:
        """Drop the ended jobs the server acknowledged and holds the whole log of; (job id, run) of each."""
        forgotten = []
        for job_id in list(self.acked):
            status = executor.status(job_id)
            if status is None:
                self.acked.discard(job_id)
            elif status.state != "running" and self.offsets.get(job_id, 0) >= executor.log_size(job_id):
                executor.forget(job_id)
                self.acked.discard(job_id)
                self.offsets.pop(job_id, None)
                forgotten.append((job_id, status.run))
        return forgotten
