"""The base of every input model: no NUL byte in any string, no NaN or Infinity in any number.

Every body a user or admin sends is parsed into an `ApiIn` (or checked with `refuse_nul`), so a string the store
cannot hold (PostgreSQL refuses NUL in text) or a job could not use (an argument or environment variable cut at
the NUL) is refused at the edge with 422 and one sentence naming where it is: `command[1] contains a NUL byte;
remove it`. Each field carries its own bounds (`nanum.server.limits`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator
from typing import Annotated, Any

from fastapi import Depends, Path, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from nanum.server.errors import Invalid, NotFound
from nanum.server.limits import MAX_ID, MAX_STORED_ID
from nanum.units import quoted


def _job_id(job_id: Annotated[int, Path(ge=0, le=MAX_ID)]) -> int:
    if job_id > MAX_STORED_ID:
        raise NotFound(f"no job {job_id}")
    return job_id


#: A job id in a path: a signed 64-bit integer (anything else is 422); one no job can have is 404 at once.
JobIdPath = Annotated[int, Depends(_job_id)]


class KnownQuery(APIRoute):
    """A route that refuses a query parameter it does not take (422), as `ApiIn` refuses a field: `GET
    /jobs?usr=bob` would otherwise list every user's jobs, and a script acting on that list act on all of them.
    The routers of users' and admins' requests are made with it (`APIRouter(route_class=KnownQuery)`); the agents'
    are not, and their protocol ignores what it does not know. Checked in the route's handler, not as a
    dependency: each dependency costs every request of a route a step of its own."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        taken = _query_names(self.dependant)
        takes = ", ".join(sorted(taken)) or "none"

        async def checked(request: Request) -> Response:
            if request.scope["query_string"]:  # most requests have none: no parsing then
                unknown = next((name for name in request.query_params if name not in taken), None)
                if unknown is not None:
                    raise Invalid(f"unknown query parameter {quoted(unknown)}; this request takes {takes} "
                                  "(docs/api.md)")
            return await handler(request)

        return checked


def _query_names(dependant: Dependant) -> frozenset[str]:
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return frozenset(names)


class ApiIn(BaseModel):
    """The base of every input model: no NaN or Infinity, no NUL byte in any string it holds, and no field it does
    not know: a misspelt one (`gpu` for `gpus`) is refused, not dropped, which would run a job other than the one
    asked for. (The agents' protocol, `nanum.protocol`, ignores what it does not know, so that agents and servers
    of different versions still talk.)"""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: Any) -> Any:
        refuse_nul(data)
        return data


def refuse_nul(data: Any, where: str = "") -> None:
    """Raise a validation error naming the first string in `data` (keys included) that holds a NUL byte."""
    for place in _nul_places(data, where):
        raise PydanticCustomError("nul_byte", "{where} contains a NUL byte; remove it", {"where": place})


def _nul_places(data: Any, where: str) -> Iterator[str]:
    if isinstance(data, str):
        if "\0" in data:
            yield where or "a value"
    elif isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and "\0" in key:
                yield f"a key of {where}" if where else f"field name {key!r}"
            yield from _nul_places(value, f"{where}[{key!r}]" if where else str(key))
    elif isinstance(data, list | tuple):
        for i, value in enumerate(data):
            yield from _nul_places(value, f"{where}[{i}]")
