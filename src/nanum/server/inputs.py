"""The base of every input model: no NUL byte in any string, no NaN or Infinity in any number, and a number
written as text only as plain digits.

Every body a user or admin sends is parsed into an `ApiIn` (or checked with `refuse_nul`), so a string the store
cannot hold (PostgreSQL refuses NUL in text) or a job could not use (an argument or environment variable cut at
the NUL) is refused at the edge with 422 and one sentence naming where it is: `command[1] contains a NUL byte;
remove it`. Each field carries its own bounds (`nanum.server.limits`).

A number field takes a JSON number, or text that is a number as written (the web forms send text): pydantic
alone would read `"1_6"` as 16, `" +16 "` as 16 and `true` as 1, a job other than the one asked for, where the
command line refuses `--gpus 1_6` (both read numbers with `nanum.units.whole_number` and `decimal_number`).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Coroutine, Iterator
from typing import Annotated, Any, ClassVar

from fastapi import Depends, Path, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from nanum.server.errors import Invalid, NotFound
from nanum.server.limits import MAX_ID, MAX_STORED_ID
from nanum.units import decimal_number, quoted, whole_number


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
    #: The model's number fields, by name: `int` or `float` (`_plain_numbers`).
    _numbers: ClassVar[dict[str, type]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._numbers = {name: kind for name, info in cls.model_fields.items()
                        if (kind := _number_kind(info.annotation)) is not None}

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: Any) -> Any:
        refuse_nul(data)
        if cls._numbers and isinstance(data, dict):
            data = _plain_numbers(data, cls._numbers)
        return data


def _plain_numbers(data: dict[str, Any], numbers: dict[str, type]) -> dict[str, Any]:
    """`data` with the text given for its number fields read as numbers (`_number`); a `true`/`false` or text that
    is not a number as written is refused naming the field."""
    read: dict[str, int | float] = {}
    for name, kind in numbers.items():
        value = data.get(name)
        if isinstance(value, str | bool):
            try:
                read[name] = _number(value, whole=kind is int)
            except ValueError as exc:
                raise PydanticCustomError("plain_number", "invalid {field}: {wrong}",
                                          {"field": name, "wrong": str(exc)}) from None
    return {**data, **read} if read else data


def _number(value: str | bool, *, whole: bool) -> int | float:
    """Text given for a number, read as it is written (`nanum.units`); ValueError saying why it is none (`true`,
    `"1_6"`). Read here, not by pydantic, which takes `"1_6"` and fails on 5,000 digits with Python's own words."""
    number = None if isinstance(value, bool) else whole_number(value) if whole else decimal_number(value)
    if number is not None:
        return number
    shown = "true" if value is True else "false" if value is False else quoted(value)
    if whole:
        raise ValueError(f"{shown} is not a whole number; give digits only, such as 3")
    raise ValueError(f"{shown} is not a number; give digits and a decimal point, such as 1.5")


def _plain(whole: bool) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        return _number(value, whole=whole) if isinstance(value, str | bool) else value

    return check


#: A number in a path or query, read as written (`/jobs/1_6` is not job 16), as in bodies (`ApiIn`).
WHOLE = BeforeValidator(_plain(whole=True))
DECIMAL = BeforeValidator(_plain(whole=False))


def _job_id(job_id: Annotated[int, WHOLE, Path(ge=0, le=MAX_ID)]) -> int:
    if job_id > MAX_STORED_ID:
        raise NotFound(f"no job {job_id}")
    return job_id


#: A job id in a path: a signed 64-bit integer (anything else is 422); one no job can have is 404 at once.
JobIdPath = Annotated[int, Depends(_job_id)]


def _number_kind(annotation: Any) -> type | None:
    """`int` or `float` where a field's type is that number (or None beside it), else None."""
    if typing.get_origin(annotation) is Annotated:
        return _number_kind(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _number_kind(kinds[0]) if len(kinds) == 1 else None
    return annotation if annotation in (int, float) else None


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
