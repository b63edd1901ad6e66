"""What the SDK raises: every failure is a `NanumError`, so a script can catch them all in one place, and each
kind says what went wrong in words a user can act on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nanum.jobref import job_ref

if TYPE_CHECKING:
    from nanum.jobfields import Job


class NanumError(Exception):
    """Anything the client reports to its caller."""


class ApiError(NanumError):
    """The server refused a request: `status` is the HTTP status, `detail` its one-line explanation."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class ServerUnreachable(NanumError, ConnectionError):
    """No nanum server answers at `server`."""

    def __init__(self, server: str) -> None:
        super().__init__(f"cannot reach the nanum server at {server}; is `nanum up` running?")
        self.server = server


class _Refused(NanumError, ValueError):
    """An argument the client refuses before sending anything (a name that would change the request's path)."""


class _NoAnswer(NanumError):
    """The server took the request but did not answer in time."""


class WaitTimeout(NanumError, TimeoutError):
    """`Client.wait` (`wait_array`) gave up before the job (every task) ended; `job` is its (the first task still
    going) last known state."""

    def __init__(self, job: Job, timeout: float) -> None:
        super().__init__(f"job {job_ref(job)} is still {job['state']} after {timeout:g} s")
        self.job = job

