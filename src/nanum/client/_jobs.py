"""The calls of the SDK on jobs: submit, list, act on one, read its output as it comes, wait for its end.

These are the calls a script makes most, and the ones that ride out a server restart on their own (`submit`
sends again with the same request id, `follow_logs` and `wait` retry while the server is away).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from nanum.client._connection import Connection
from nanum.client._errors import ServerUnreachable, WaitTimeout, _NoAnswer
from nanum.client._objects import ACTIVE_STATES, TERMINAL_STATES, LogChunk

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from nanum.jobfields import Job, JobChanges, SubmitFields

#: How long `Client.submit` keeps sending a submission the server did not answer.
_SUBMIT_RETRY_S = 5.0


class JobCalls(Connection):
    """`Client`'s calls on jobs."""

    def submit(self, command: Sequence[str], **fields: Unpack[SubmitFields]) -> Job:
        """Queue `command` (argv list) with the given fields; returns the new job.

        Each call sends a fresh `client_request_id` (unless one is given), and sends the same request again
        when the server did not answer (a dropped connection, a restart, a timeout): the server returns the job
        the first attempt made, so a retry never queues the job twice."""
        body: dict[str, Any] = {"command": list(command), **fields}
        body.setdefault("client_request_id", os.urandom(16).hex())  # random as a uuid4, without importing uuid
        give_up, pause, tries = time.monotonic() + _SUBMIT_RETRY_S, 0.2, 0
        while True:
            tries += 1
            try:
                return self._call("POST", "/jobs", json=body).json()  # type: ignore[no-any-return]
            except (ServerUnreachable, _NoAnswer):
                if tries >= 2 and time.monotonic() >= give_up:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 2.0)

    def jobs(
        self,
        *,
        all: bool = False,
        user: str | None = None,
        lab: str | None = None,
        state: str | Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[Job]:
        """Jobs ordered by id: active ones of every user, or with `all=True` finished ones too (of those the latest
        `limit`, 1,000 unless given; at most 100,000)."""
        params: list[tuple[str, str]] = [("all", "true")] if all else []
        params += [("limit", str(limit))] if limit is not None else []
        params += [("user", user)] if user else []
        params += [("lab", lab)] if lab else []
        states = [state] if isinstance(state, str) else list(state or ())
        params += [("state", s) for s in states]
        return self._call("GET", "/jobs", params=params).json()  # type: ignore[no-any-return]

    def job(self, job_id: int) -> Job:
        return self._call("GET", f"/jobs/{job_id}").json()  # type: ignore[no-any-return]

    def cancel(self, job_id: int, *, one: bool = False) -> Job:
        """Cancel a job of yours (any job, as an admin); 409 if it already ended. An array's id cancels all its
        tasks; `one=True` only the task with that job id."""
        return self._act(job_id, "cancel", one)

    def hold(self, job_id: int, *, one: bool = False) -> Job:
        """Keep a pending job (an array's pending tasks) from starting until `release`."""
        return self._act(job_id, "hold", one)

    def release(self, job_id: int, *, one: bool = False) -> Job:
        """Let a held job (an array's held tasks) be scheduled again."""
        return self._act(job_id, "release", one)

    def top(self, job_id: int, *, one: bool = False) -> Job:
        """Move a waiting job (an array's waiting tasks) before your other waiting jobs of its tier."""
        return self._act(job_id, "top", one)

    def requeue(self, job_id: int, *, one: bool = False) -> Job:
        """Stop a running job and queue it again, or queue an ended one again (an array's tasks that run or
        ended)."""
        return self._act(job_id, "requeue", one)

    def modify(self, job_id: int, **changes: Unpack[JobChanges]) -> Job:
        """Change a waiting job: the fields given (`JobChanges`); as an admin, its tier too. None makes gpu_model,
        gpu_memory_mb and memory_mb any model, any memory, no limit."""
        return self._call("PATCH", f"/jobs/{job_id}", json=changes).json()  # type: ignore[no-any-return]

    def array_tasks(self, array_id: int) -> list[Job]:
        """Every task of an array, finished ones too, by task index."""
        return self._call("GET", "/jobs", params=[("array", str(array_id))]).json()  # type: ignore[no-any-return]

    def _act(self, job_id: int, action: str, one: bool) -> Job:
        params = [("one", "true")] if one else None
        return self._call("POST", f"/jobs/{job_id}/{action}", params=params).json()  # type: ignore[no-any-return]

    def logs(self, job_id: int, offset: int = 0, node: str | None = None) -> LogChunk:
        """The job's output (stdout and stderr together) from byte `offset`; `node` (a name or rank): that node's
        output alone, of a multi-node job (whose log otherwise leads each line with `[node]`)."""
        params: dict[str, Any] = {"offset": offset} if node is None else {"offset": offset, "node": node}
        response = self._call("GET", f"/jobs/{job_id}/logs", params=params)
        next_offset = int(response.header("X-Nanum-Log-Offset") or offset + len(response.content))
        return LogChunk(response.text, next_offset, response.header("X-Nanum-Job-State") or "",
                        int(response.header("X-Nanum-Log-Missing") or 0), response.header("X-Nanum-Job-Ref") or "")

    def follow_logs(self, job_id: int, offset: int = 0, poll_s: float = 0.5, settle_s: float = 10.0,
                    node: str | None = None) -> Iterator[str]:
        """Yield the job's output as it arrives, until the job has ended and the server holds all of it.

        The report of a job's end carries the rest of its output, unless there was more than a heartbeat
        carries: then the server says how much is still to come, and it is waited for, as long as some arrives
        every `settle_s` seconds (its node may have gone down meanwhile)."""
        for chunk in self.follow_log_chunks(job_id, offset, poll_s, settle_s, node):
            if chunk.text:
                yield chunk.text

    def follow_log_chunks(self, job_id: int, offset: int = 0, poll_s: float = 0.5, settle_s: float = 10.0,
                          node: str | None = None) -> Iterator[LogChunk]:
        """`follow_logs`, chunk by chunk: each one with output, then the last read (no text; its `missing` says
        how much output its node still held when waiting for it ended)."""
        quiet_since: float | None = None
        while True:
            chunk = self._retrying(functools.partial(self.logs, job_id, offset, node))
            offset = chunk.offset
            if chunk.text:
                quiet_since = None
                yield chunk
                continue
            if chunk.state in TERMINAL_STATES:
                quiet_since = quiet_since or time.monotonic()
                if not chunk.missing or time.monotonic() - quiet_since >= settle_s:
                    yield chunk
                    return
            time.sleep(min(poll_s, 0.05) if chunk.state in TERMINAL_STATES else poll_s)

    def wait(self, job_id: int, timeout: float | None = None, poll_s: float = 0.1) -> Job:
        """Block until the job ends and return it; raise `WaitTimeout` after `timeout` seconds.

        Polls with a growing interval (`poll_s` up to 1 s) and rides out brief server restarts."""
        [job] = self._wait_for(lambda: [self.job(job_id)], timeout, poll_s)
        return job

    def wait_array(self, array_id: int, timeout: float | None = None, poll_s: float = 0.1) -> list[Job]:
        """Block until every task of array `array_id` has ended and return them by task index, as `wait` does for
        one job (`WaitTimeout` names the first task still going); an id that is no array's gives []. Each look asks
        for the tasks not ended only: a large array's ended ones are read once, at the end."""
        going = [("array", str(array_id)), *(("state", state) for state in ACTIVE_STATES)]
        self._wait_for(lambda: self._call("GET", "/jobs", params=going).json(), timeout, poll_s)
        return self.array_tasks(array_id)

    def _wait_for(self, fetch: Callable[[], list[Job]], timeout: float | None, poll_s: float) -> list[Job]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            jobs = self._retrying(fetch, deadline)
            going = [j for j in jobs if j["state"] not in TERMINAL_STATES]
            if not going:
                return jobs
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(going[0], timeout or 0.0)
            pause = poll_s if deadline is None else min(poll_s, max(deadline - time.monotonic(), 0.0))
            time.sleep(pause)
            poll_s = min(poll_s * 1.5, 1.0)
