"""The Python SDK: a typed HTTP client for the nanum server, used by the CLI, the tests and your own scripts.

    from nanum.client import Client

    with Client.from_settings() as nanum:            # NANUM_SERVER/NANUM_TOKEN, else `nanum login`'s file
        job = nanum.submit(["python", "train.py"], gpus=2, time_limit_s=4 * 3600)
        done = nanum.wait(job["id"], timeout=8 * 3600)
        print(done["state"], done["exit_code"], nanum.logs(job["id"]).text)

Objects come back exactly as the API returns them (docs/api.md), typed as `TypedDict`s. Failures raise
`ApiError` (the server refused: `.status`, `.detail`), `ServerUnreachable` or `WaitTimeout`, all of them
`NanumError`s.

The client speaks HTTP/1.1 over one kept-alive connection with the standard library (`nanum._http`), because
the `nanum` command must start fast and httpx with httpcore costs 50 ms to import. Pass any httpx transport
(`transport=httpx.MockTransport(handler)` in tests, `httpx.HTTPTransport(proxy=...)` behind a proxy) to send
the same requests through httpx instead.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, TypeVar

from nanum._http import ConnectFailed, FailoverTransport, HttpTransport, Response, StdlibTransport, Timeout

if TYPE_CHECKING:
    import httpx
    from typing_extensions import Unpack

__all__ = [
    "TERMINAL_STATES",
    "Allocation",
    "ApiError",
    "Client",
    "Gpu",
    "Job",
    "Lab",
    "LogChunk",
    "Me",
    "NanumError",
    "NewToken",
    "Node",
    "ServerUnreachable",
    "SubmitFields",
    "WaitTimeout",
    "resolve_settings",
]

_T = TypeVar("_T")
TERMINAL_STATES = frozenset({"completed", "failed", "cancelled", "timeout"})
#: How long `Client.submit` keeps sending a submission the server did not answer.
_SUBMIT_RETRY_S = 5.0


class Allocation(TypedDict):
    node: str
    gpus: list[int]


class Job(TypedDict):
    id: int
    name: str
    user: str
    lab: str
    state: str
    reason: str | None
    reason_code: str | None
    estimated_start: str | None
    gpus: int
    nodes: int
    gpu_model: str | None
    cpus: int
    memory_mb: int | None
    time_limit_s: float | None
    priority: int
    kind: str
    preemptible: bool
    requeue: bool
    borrowing: bool
    over_reservation: bool
    burst: int | None
    allocation: list[Allocation]
    submit_time: str
    start_time: str | None
    end_time: str | None
    exit_code: int | None
    command: list[str]
    workdir: str
    env: dict[str, str] | None  # None on other users' jobs: only the owner and admins see it
    runs: int
    preemptions: int
    lost_gpu_hours: float
    last_checkpoint: str | None
    hint: str | None
    budget_warning: str | None
    segments: list[dict[str, Any]] | None
    array_id: int | None
    array_task: int | None
    array_limit: int | None
    after: list[list[str]] | None
    keep_if_unmet: bool
    retries: int
    exits: list[int | None]


class SubmitFields(TypedDict, total=False):
    """The optional fields of `POST /jobs`; anything left out takes the server's default."""

    name: str
    gpus: int
    nodes: int
    gpu_model: str | None
    gpu_memory_mb: int | None
    constraints: list[str]
    torchrun: bool
    cpus: int
    memory_mb: int | None
    time_limit_s: float | None
    priority: int
    lab: str | None
    workdir: str
    env: dict[str, str]
    kind: str
    preemptible: bool
    requeue: bool
    client_request_id: str
    array: str
    after: list[str]
    after_ok: list[str]
    after_failed: list[str]
    after_any: list[str]
    keep_if_unmet: bool
    retries: int


class Gpu(TypedDict):
    index: int
    uuid: str
    model: str
    memory_mb: int
    job_id: int | None
    user: str | None


class Node(TypedDict):
    name: str
    state: str
    last_seen: str | None
    simulated: bool
    cpus: int
    memory_mb: int
    limits: str
    gpus: list[Gpu]
    unaccepted_gpus: list[Gpu]


class Me(TypedDict):
    name: str
    admin: bool
    labs: list[str]
    default_lab: str | None
    unix_user: str | None


class Lab(TypedDict, total=False):
    name: str
    guaranteed_gpus: int | None
    max_gpus: int | None
    max_running_jobs: int | None
    monthly_gpu_hours: float | None
    weight: float
    grace_s: float | None
    #: when the lab's guarantee is more than the cluster's GPUs (on create and update)
    warning: str


class NewToken(TypedDict):
    """A created user or node with its token, shown once."""

    name: str
    token: str


class LogChunk(NamedTuple):
    """Output of a job from some byte offset; `offset` is where the next read starts, `state` the job's."""

    text: str
    offset: int
    state: str


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


class _NoAnswer(NanumError):
    """The server took the request but did not answer in time."""


class WaitTimeout(NanumError, TimeoutError):
    """`Client.wait` gave up before the job ended; `job` is its last known state."""

    def __init__(self, job: Job, timeout: float) -> None:
        super().__init__(f"job {job['id']} is still {job['state']} after {timeout:g} s")
        self.job = job


def resolve_settings(server: str | None = None, token: str | None = None) -> tuple[str | None, str | None]:
    """Server URL and token: the arguments, else NANUM_SERVER/NANUM_TOKEN, else the credentials file."""
    server = server or os.environ.get("NANUM_SERVER") or None
    token = token or os.environ.get("NANUM_TOKEN") or None
    if server is None or token is None:
        from nanum.config import load_credentials

        saved = load_credentials()
        if server is None:
            server = saved.get("server")
            token = token or saved.get("token")
        elif token is None and saved.get("server", "").rstrip("/") == server.rstrip("/"):
            token = saved.get("token")
    return server, token


def _transport(url: str, headers: dict[str, str], timeout: float,
               transport: httpx.BaseTransport | None) -> HttpTransport:
    base = f"{url}/api/v1"
    if transport is not None:
        from nanum._http import HttpxTransport

        return HttpxTransport(base, headers, timeout, transport)
    try:
        return StdlibTransport(base, headers, timeout)
    except ValueError:
        raise NanumError(f"{url!r} is not a server URL; give one like http://127.0.0.1:8765") from None


class Client:
    """A connection to one nanum server as one user (or admin): a context manager, or call `close()`."""

    def __init__(
        self,
        server: str,
        token: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        #: every server URL given (`URL1,URL2`: two servers on one database; the first that answers is used)
        self.servers = tuple(url.strip().rstrip("/") for url in server.split(",") if url.strip())
        if not self.servers:
            raise NanumError(f"{server!r} is not a server URL; give one like http://127.0.0.1:8765")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        each = [_transport(url, headers, timeout, transport) for url in self.servers]
        self._http: HttpTransport = each[0] if len(each) == 1 else FailoverTransport(each)

    @property
    def server(self) -> str:
        """The server URL in use: the one that answered last, when several were given."""
        return self.servers[self._http.current if isinstance(self._http, FailoverTransport) else 0]

    @classmethod
    def from_settings(cls, server: str | None = None, token: str | None = None) -> Client:
        """A client for the configured server (see `resolve_settings`)."""
        url, tok = resolve_settings(server, token)
        if url is None:
            raise NanumError(
                "no nanum server configured; start one with `nanum up`, or run "
                "`nanum login --server URL --token TOKEN`, or set NANUM_SERVER and NANUM_TOKEN"
            )
        return cls(url, tok)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- jobs -------------------------------------------------------------------------------------------

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
    ) -> list[Job]:
        """Jobs ordered by id: active ones of every user, or with `all=True` finished ones too."""
        params: list[tuple[str, str]] = [("all", "true")] if all else []
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

    def top(self, job_id: int) -> Job:
        """Move a waiting job before your other waiting jobs."""
        return self._act(job_id, "top", False)

    def requeue(self, job_id: int) -> Job:
        """Stop a running job and queue it again, or queue an ended one again."""
        return self._act(job_id, "requeue", False)

    def modify(self, job_id: int, **changes: Any) -> Job:
        """Change a waiting job: time_limit_s, gpus, priority, lab, name."""
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
        return LogChunk(response.text, next_offset, response.header("X-Nanum-Job-State") or "")

    def follow_logs(self, job_id: int, offset: int = 0, poll_s: float = 0.5, settle_s: float = 1.0,
                    node: str | None = None) -> Iterator[str]:
        """Yield the job's output as it arrives, until the job has ended and its output stopped coming.

        An agent may ship the last output just after the exit status, so an ended job is read again until
        nothing new came for `settle_s` seconds."""
        quiet_since: float | None = None
        while True:
            chunk = self._retrying(functools.partial(self.logs, job_id, offset, node))
            offset = chunk.offset
            if chunk.text:
                quiet_since = None
                yield chunk.text
                continue
            if chunk.state in TERMINAL_STATES:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= settle_s:
                    return
            time.sleep(min(poll_s, settle_s / 4) if chunk.state in TERMINAL_STATES else poll_s)

    def wait(self, job_id: int, timeout: float | None = None, poll_s: float = 0.1) -> Job:
        """Block until the job ends and return it; raise `WaitTimeout` after `timeout` seconds.

        Polls with a growing interval (`poll_s` up to 1 s) and rides out brief server restarts."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self._retrying(functools.partial(self.job, job_id), deadline)
            if job["state"] in TERMINAL_STATES:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(job, timeout or 0.0)
            pause = poll_s if deadline is None else min(poll_s, max(deadline - time.monotonic(), 0.0))
            time.sleep(pause)
            poll_s = min(poll_s * 1.5, 1.0)

    # -- cluster, users, labs -----------------------------------------------------------------------------

    def nodes(self) -> list[Node]:
        return self._call("GET", "/nodes").json()  # type: ignore[no-any-return]

    def accept_node(self, name: str) -> Node:
        """Schedule the GPUs a node reports beyond those it was accepted with (admin)."""
        return self._call("POST", f"/nodes/{name}/accept").json()  # type: ignore[no-any-return]

    def set_node(self, name: str, *, owner: str | None = None, labels: Sequence[str] = (),
                 gpu_model: str | None = None) -> Node:
        """Set a node's owner lab ("" for none), labels (`key=value`; `key=` removes one) or GPU model name ("" for
        the one its agent reports) (admin)."""
        body = {"owner": owner, "labels": list(labels), "gpu_model": gpu_model}
        return self._call("PATCH", f"/nodes/{name}", json=body).json()  # type: ignore[no-any-return]

    def drain_node(self, name: str, reason: str | None = None) -> Node:
        """Keep new jobs off a node; its running jobs finish (admin)."""
        return self._call("POST", f"/nodes/{name}/drain", json={"reason": reason}).json()  # type: ignore[no-any-return]

    def resume_node(self, name: str) -> Node:
        """End a node's drain and return its GPUs taken out of service for health problems (admin)."""
        return self._call("POST", f"/nodes/{name}/resume").json()  # type: ignore[no-any-return]

    def remove_node(self, name: str) -> None:
        """Forget a node; its agent's token stops working (admin)."""
        self._call("DELETE", f"/nodes/{name}")

    def add_node(self, name: str) -> NewToken:
        """Register a node (admin); the token is what `nanum agent --token-file FILE` reads."""
        return self._call("POST", "/nodes", json={"name": name}).json()  # type: ignore[no-any-return]

    def me(self) -> Me:
        return self._call("GET", "/me").json()  # type: ignore[no-any-return]

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health").json()  # type: ignore[no-any-return]

    def users(self) -> list[dict[str, Any]]:
        return self._call("GET", "/users").json()  # type: ignore[no-any-return]

    def add_user(
        self, name: str, labs: Sequence[str] = (), *, admin: bool = False, unix_user: str | None = None
    ) -> NewToken:
        """Create a user (admin); the first lab is the user's default and labs are created if missing."""
        body = {"name": name, "labs": list(labs), "admin": admin, "unix_user": unix_user}
        return self._call("POST", "/users", json=body).json()  # type: ignore[no-any-return]

    def labs(self) -> list[Lab]:
        return self._call("GET", "/labs").json()  # type: ignore[no-any-return]

    def add_lab(self, name: str, **quota: Any) -> Lab:
        """Create a lab (admin) with optional `guaranteed_gpus`, `max_gpus`, `max_running_jobs`,
        `monthly_gpu_hours`, `weight`."""
        return self._call("POST", "/labs", json={"name": name, **quota}).json()  # type: ignore[no-any-return]

    def lab(self, name: str) -> dict[str, Any]:
        """One lab: quota, members, jobs and GPUs now, this month's usage and budget, lost work, quota history."""
        return self._call("GET", f"/labs/{name}").json()  # type: ignore[no-any-return]

    def set_lab(self, name: str, **quota: Any) -> Lab:
        """Change a lab's quota (admin): only the fields given change; None removes a limit."""
        return self._call("PATCH", f"/labs/{name}", json=quota).json()  # type: ignore[no-any-return]

    def set_user(self, name: str, **limits: Any) -> dict[str, Any]:
        """Set a user's own `max_gpus`, `max_running_jobs`, `monthly_gpu_hours` (admin); None removes one."""
        return self._call("PATCH", f"/users/{name}", json=limits).json()  # type: ignore[no-any-return]

    def import_users(self, users: list[dict[str, Any]], *, dry_run: bool = False) -> dict[str, Any]:
        """Create or update many users (admin): each ends with exactly the listed `labs`, `role` (member,
        manager, admin), `unix_user` and `email`. The report lists what was created (with tokens) and changed."""
        body = {"users": users, "dry_run": dry_run}
        return self._call("POST", "/users/import", json=body).json()  # type: ignore[no-any-return]

    def auth_methods(self) -> dict[str, Any]:
        """How this server lets people log in (no token needed): `token` always, `password` with a directory."""
        return self._call("GET", "/auth").json()  # type: ignore[no-any-return]

    def password_login(self, username: str, password: str, token_name: str = "login") -> dict[str, Any]:
        """Log in with a directory name and password (no token needed); the reply holds a new API token
        (`token`, expiring at `expires`), the user's `name`, `unix_user` and `labs`."""
        body = {"username": username, "password": password, "token_name": token_name}
        return self._call("POST", "/login", json=body).json()  # type: ignore[no-any-return]

    def set_user_disabled(self, name: str, disabled: bool) -> dict[str, Any]:
        """Disable a user (admin), or enable them again."""
        verb = "disable" if disabled else "enable"
        return self._call("POST", f"/users/{name}/{verb}").json()  # type: ignore[no-any-return]

    def oidc_login(self, id_token: str, token_name: str = "login") -> dict[str, Any]:
        """Trade an ID token from the server's single sign-on provider for an API token (no token needed); the
        reply is as `password_login`'s."""
        body = {"id_token": id_token, "token_name": token_name}
        return self._call("POST", "/login/oidc", json=body).json()  # type: ignore[no-any-return]

    def tokens(self, user: str | None = None) -> list[dict[str, Any]]:
        """Your API tokens (an admin: `user`'s), never their values; id 0 is the first token."""
        params = {"user": user} if user else None
        return self._call("GET", "/tokens", params=params).json()  # type: ignore[no-any-return]

    def create_token(self, name: str, expires_in_s: float | None = None) -> dict[str, Any]:
        """A new token for yourself; its value (`token`) is in this reply only."""
        body = {"name": name, "expires_in_s": expires_in_s}
        return self._call("POST", "/tokens", json=body).json()  # type: ignore[no-any-return]

    def revoke_token(self, token_id: int, user: str | None = None) -> None:
        """Revoke one of your tokens (an admin: `user`'s) at once."""
        self._call("DELETE", f"/tokens/{token_id}", params={"user": user} if user else None)

    def lab_members(self, lab: str) -> list[dict[str, Any]]:
        """A lab's members with their roles and limits (its managers and admins)."""
        return self._call("GET", f"/labs/{lab}/members").json()  # type: ignore[no-any-return]

    def put_member(self, lab: str, user: str, role: str = "member") -> dict[str, Any]:
        """Add an existing user to a lab or change their role there (a manager of the lab, or an admin; only an
        admin makes a `manager`)."""
        return self._call("PUT", f"/labs/{lab}/members/{user}", json={"role": role}).json()  # type: ignore[no-any-return]

    def remove_member(self, lab: str, user: str) -> None:
        """Take a user out of a lab (its managers, admins); their jobs stay."""
        self._call("DELETE", f"/labs/{lab}/members/{user}")

    def set_member_limits(self, lab: str, user: str, **limits: Any) -> dict[str, Any]:
        """A member's own `max_gpus`, `max_running_jobs`, `monthly_gpu_hours`, within the lab's (its managers,
        admins); None removes one."""
        return self._call("PATCH", f"/labs/{lab}/members/{user}", json=limits).json()  # type: ignore[no-any-return]

    # -- sharing ---------------------------------------------------------------------------------------------

    def usage(
        self,
        *,
        month: str | None = None,
        since: str | None = None,
        until: str | None = None,
        by: str | None = None,
        lab: str | None = None,
        user: str | None = None,
    ) -> dict[str, Any]:
        """GPU-hours, jobs, average wait and budget use over a month (`YYYY-MM`) or `since`/`until` (UTC dates or
        times; default this month), grouped `by` day, user or lab."""
        given = {"month": month, "since": since, "until": until, "by": by, "lab": lab, "user": user}
        params = [(k, v) for k, v in given.items() if v]
        return self._call("GET", "/usage", params=params).json()  # type: ignore[no-any-return]

    def trace(self, *, since: str | None = None, until: str | None = None) -> dict[str, Any]:
        """The store's jobs that started, submitted in [since, until) (UTC dates or times), as simulator trace rows,
        with the cluster and the server's policy."""
        params = [(k, v) for k, v in (("since", since), ("until", until)) if v]
        return self._call("GET", "/trace", params=params).json()  # type: ignore[no-any-return]

    def usage_report(self, *, since: str | None = None, until: str | None = None,
                     by: str | None = None) -> dict[str, Any]:
        """The usage report: used vs available, utilisation, idle-but-held, waits, lost work, budgets, top users."""
        params = [(k, v) for k, v in (("since", since), ("until", until), ("by", by)) if v]
        return self._call("GET", "/reports/usage", params=params).json()  # type: ignore[no-any-return]

    def priority(self, *, user: str | None = None, lab: str | None = None) -> dict[str, Any]:
        """Every pending job's priority and its factors, with its place in the queue."""
        params = [(k, v) for k, v in (("user", user), ("lab", lab)) if v]
        return self._call("GET", "/priority", params=params).json()  # type: ignore[no-any-return]

    def checkpoint(self, job_id: int) -> Job:
        """Tell the server a running job has just saved its state (a preemption then loses only later work)."""
        return self._call("POST", f"/jobs/{job_id}/checkpoint").json()  # type: ignore[no-any-return]

    # -- monitoring -----------------------------------------------------------------------------------------

    def environments(self) -> list[dict[str, Any]]:
        """The environments you may use (`nanum environment list`)."""
        return self._call("GET", "/environments").json()  # type: ignore[no-any-return]

    def environment(self, name: str) -> dict[str, Any]:
        return self._call("GET", f"/environments/{name}").json()  # type: ignore[no-any-return]

    def add_environment(self, name: str, **fields: Any) -> dict[str, Any]:
        """Add an environment: `image` (and `runtime`), or `python`, and/or `setup`; `description`, `lab`."""
        body = {"name": name, **{k: v for k, v in fields.items() if v is not None}}
        return self._call("POST", "/environments", json=body).json()  # type: ignore[no-any-return]

    def remove_environment(self, name: str) -> None:
        self._call("DELETE", f"/environments/{name}")

    def datasets(self) -> list[dict[str, Any]]:
        return self._call("GET", "/datasets").json()  # type: ignore[no-any-return]

    def add_dataset(self, name: str, path: str, **fields: Any) -> dict[str, Any]:
        body = {"name": name, "path": path, **{k: v for k, v in fields.items() if v is not None}}
        return self._call("POST", "/datasets", json=body).json()  # type: ignore[no-any-return]

    def remove_dataset(self, name: str) -> None:
        self._call("DELETE", f"/datasets/{name}")

    def checkpoints(self, job_id: int) -> dict[str, Any]:
        """The files in a job's checkpoint directory, with sizes and times."""
        return self._call("GET", f"/jobs/{job_id}/checkpoints").json()  # type: ignore[no-any-return]

    def job_usage(self, job_id: int) -> dict[str, Any]:
        """A job's GPU use: utilisation now and on average, idle state, timeline, efficiency summary once ended."""
        return self._call("GET", f"/jobs/{job_id}/usage").json()  # type: ignore[no-any-return]

    def idle_policy(self, lab: str | None = None) -> dict[str, Any]:
        """The idle policy in force (the server's, or a lab's) and the fields that layer sets itself."""
        return self._call("GET", f"/labs/{lab}/idle" if lab else "/monitoring/idle").json()  # type: ignore[no-any-return]

    def set_idle_policy(self, changes: dict[str, Any], lab: str | None = None) -> dict[str, Any]:
        """Change idle thresholds or windows (seconds; None: never; "inherit": the layer below) (admin)."""
        path = f"/labs/{lab}/idle" if lab else "/monitoring/idle"
        return self._call("PATCH", path, json=changes).json()  # type: ignore[no-any-return]

    def notify_settings(self) -> dict[str, Any]:
        return self._call("GET", "/monitoring/notify").json()  # type: ignore[no-any-return]

    def set_notify(self, **settings: Any) -> dict[str, Any]:
        """Webhook URL, dashboard URL and SMTP settings for notices about idle jobs (admin)."""
        return self._call("PATCH", "/monitoring/notify", json=settings).json()  # type: ignore[no-any-return]

    def set_contact(self, user: str, email: str | None = None, webhook: str | None = None) -> dict[str, Any]:
        """Where `user` hears about their jobs (themselves, or anyone as an admin)."""
        body = {"email": email, "webhook": webhook}
        return self._call("PUT", f"/users/{user}/contact", json=body).json()  # type: ignore[no-any-return]

    # -- plumbing -------------------------------------------------------------------------------------------

    def _call(
        self, method: str, path: str, *, json: Any = None, params: Any = None
    ) -> Response:
        try:
            response = self._http.request(method, path, json=json, params=params)
        except ConnectFailed as exc:
            raise ServerUnreachable(" or ".join(self.servers)) from exc
        except Timeout as exc:
            raise _NoAnswer(f"the nanum server at {self.server} did not answer in time") from exc
        if response.status >= 400:
            raise ApiError(response.status, _detail(response))
        return response

    def _retrying(self, call: Callable[[], _T], deadline: float | None = None, outage_s: float = 60.0) -> _T:
        """Run `call`, retrying while the server is unreachable (a restart) for up to `outage_s` seconds."""
        give_up = time.monotonic() + outage_s
        if deadline is not None:
            give_up = min(give_up, deadline)
        pause = 0.2
        while True:
            try:
                return call()
            except ServerUnreachable:
                if time.monotonic() >= give_up:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 2.0)


def _detail(response: Response) -> str:
    """The server's `detail` as one line (FastAPI validation errors are lists of {loc, msg})."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, list):
        parts = []
        for item in detail:
            loc = [str(p) for p in item.get("loc", ()) if p not in ("body", "query", "path")]
            parts.append(f"{'.'.join(loc)}: {item.get('msg', '')}" if loc else str(item.get("msg", item)))
        detail = "; ".join(parts)
    if not detail:
        detail = response.text.strip() or response.reason
    return f"{detail}".replace("\n", " ")
