"""The Python SDK: a typed HTTP client for the nanum server, used by the CLI, the tests and your own scripts.

    from nanum.client import Client

    with Client.from_settings() as nanum:            # NANUM_SERVER/NANUM_TOKEN, else `nanum login`'s file
        job = nanum.submit(["python", "train.py"], gpus=2, time_limit_s=4 * 3600)
        done = nanum.wait(job["id"], timeout=8 * 3600)
        print(done["state"], done["exit_code"], nanum.logs(job["id"]).text)

Objects come back exactly as the API returns them (docs/api.md), typed as `TypedDict`s; a job's are declared in
`nanum.jobfields`, which the server's models are built from, and imported from there when first asked for
(the command line does not need them to run). Failures raise
`ApiError` (the server refused: `.status`, `.detail`), `ServerUnreachable` or `WaitTimeout`, all of them
`NanumError`s. A name (of a node, lab, user, environment or dataset) goes into the request's path percent-encoded;
one that would change the path (empty, `.`, `..`, or with a `/`) is refused before anything is sent, with a
`NanumError` that is also a `ValueError`.

The client speaks HTTP/1.1 over one kept-alive connection with the standard library (`nanum._http`), because
the `nanum` command must start fast and httpx with httpcore costs 50 ms to import. Pass any httpx transport
(`transport=httpx.MockTransport(handler)` in tests, `httpx.HTTPTransport(proxy=...)` behind a proxy) to send
the same requests through httpx instead.
"""

from typing import TYPE_CHECKING, Any

from nanum.client._cluster import ClusterCalls
from nanum.client._connection import resolve_settings
from nanum.client._errors import ApiError, NanumError, ServerUnreachable, WaitTimeout, _NoAnswer
from nanum.client._jobs import JobCalls
from nanum.client._objects import TERMINAL_STATES, Gpu, Lab, LogChunk, Me, NewToken, Node
from nanum.client._sharing import SharingCalls

if TYPE_CHECKING:
    from nanum.jobfields import Allocation, Job, JobChanges, Segment, SubmitFields

__all__ = [
    "TERMINAL_STATES",
    "Allocation",
    "ApiError",
    "Client",
    "Gpu",
    "Job",
    "JobChanges",
    "Lab",
    "LogChunk",
    "Me",
    "NanumError",
    "NewToken",
    "Node",
    "Segment",
    "ServerUnreachable",
    "SubmitFields",
    "WaitTimeout",
    "resolve_settings",
]


class Client(JobCalls, ClusterCalls, SharingCalls):
    """A connection to one nanum server as one user (or admin): a context manager, or call `close()`.

    Its calls are in `JobCalls`, `ClusterCalls` and `SharingCalls`, one module each beside this one; all of them
    go through `Connection`."""


#: The names of a job's TypedDicts, which `nanum.jobfields` declares.
_JOB_FIELDS = ("Allocation", "Job", "JobChanges", "Segment", "SubmitFields")


def __getattr__(name: str) -> Any:
    if name not in _JOB_FIELDS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import nanum.jobfields

    return getattr(nanum.jobfields, name)


# Every other name here is defined in a private module beside this one and shows itself (in reprs, tracebacks
# and pickles) as nanum.client's, where it is imported from.
for _public in (*(globals()[n] for n in __all__ if n not in ("TERMINAL_STATES", *_JOB_FIELDS)), _NoAnswer):
    _public.__module__ = __name__
