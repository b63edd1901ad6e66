"""JSON responses rendered straight from trusted bodies.

A route that returns a model has FastAPI validate it again and encode it in Python. The job routes build their
bodies from rows of the store (see `nanum.server.views.job_out`), so they are rendered once, in C, by
pydantic-core. The routes still declare `response_model`, so the OpenAPI schema is unchanged.

No body the API returns holds NaN or Infinity, which JSON cannot carry: both render as null (an old row may hold
a number no longer accepted, or a reading may be NaN).
"""

from __future__ import annotations

from typing import Any

import pydantic_core
from fastapi.responses import JSONResponse, Response


def json(body: Any, status_code: int = 200) -> Response:
    return Response(_render(body), status_code=status_code, media_type="application/json")


class SafeJSONResponse(JSONResponse):
    """The app's default response: JSON with NaN and Infinity as null (Starlette's would fail with 500)."""

    def render(self, content: Any) -> bytes:
        return _render(content)


def _render(body: Any) -> bytes:
    return pydantic_core.to_json(body, inf_nan_mode="null")
