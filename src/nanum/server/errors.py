"""Typed service errors and the handlers that turn every error into `{"detail": "one sentence"}`.

Services raise `BadRequest`, `Unauthorized`, `Forbidden`, `NotFound`, `Conflict` or `Invalid`; routes never build error
responses themselves. Validation errors (422) name the field and what is wrong with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from nanum.units import quoted


class ApiError(Exception):
    status = 400

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class BadRequest(ApiError):
    status = 400


class Unauthorized(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    status = 409


class Invalid(ApiError):
    """A value that is well-formed but out of what the server accepts (an out-of-range date, a webhook host)."""

    status = 422



def validation_message(errors: Sequence[Any]) -> str:
    """The first validation error as one sentence: `gpus: input should be greater than or equal to 0`."""
    if not errors:
        return "invalid request"
    err = errors[0]
    if err.get("type") == "json_invalid":
        return "the request body is not valid JSON"
    if err.get("type") in ("nul_byte", "plain_number"):
        return str(err.get("msg"))
    loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path", "header") and not _type_tag(p)]
    field = ".".join(loc) or "request body"
    if err.get("type") == "extra_forbidden":
        return f"unknown field {quoted(field)}; docs/api.md lists the fields this request takes"
    msg = str(err.get("msg", "is invalid"))
    if err.get("type") == "value_error" and (err.get("ctx") or {}).get("error") is not None:
        msg = str(err["ctx"]["error"])  # a validator's own sentence, without pydantic's "Value error, " before it
    msg = msg[:1].lower() + msg[1:]
    return f"invalid {field}: {msg}"


def _type_tag(part: object) -> bool:
    """Whether a part of an error's location names which type of a union failed (`constrained-int`,
    `literal['inherit']`, `float`), not a field: `util_percent`, not `util_percent.constrained-int`."""
    return isinstance(part, str) and (not part.isidentifier() or part in _TYPE_NAMES)


_TYPE_NAMES = frozenset({"int", "float", "str", "bool", "none", "list", "dict"})


def install(app: FastAPI) -> None:
    async def on_api_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse({"detail": exc.detail}, status_code=exc.status, headers=headers)

    async def on_validation(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return JSONResponse({"detail": validation_message(exc.errors())}, status_code=422)

    async def on_http(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=exc.headers)

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    _publish_error_shape(app)


#: What every error body is, as the OpenAPI schema publishes it.
ERROR_SCHEMA = {
    "title": "Error",
    "type": "object",
    "properties": {"detail": {"title": "Detail", "type": "string", "description": "what went wrong, in one sentence"}},
    "required": ["detail"],
}


def _publish_error_shape(app: FastAPI) -> None:
    """Make the published schema describe 422 bodies as they are sent (`{"detail": "one sentence"}`), not as
    FastAPI's default list of validation errors, so clients generated from it can read them."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schemas = generate().get("components", {}).get("schemas", {})
            if "HTTPValidationError" in schemas:
                schemas["HTTPValidationError"] = ERROR_SCHEMA
                schemas.pop("ValidationError", None)
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]
