"""JSON responses rendered straight from trusted bodies.

A route that returns a model has FastAPI validate it again and encode it in Python. The job routes build their
bodies from rows of the store (see `nanum.server.views.job_out`), so they are rendered once, in C, by
pydantic-core. The routes still declare `response_model`, so the OpenAPI schema is unchanged.
"""

from __future__ import annotations

from typing import Any

import pydantic_core
from fastapi.responses import Response


def json(body: Any, status_code: int = 200) -> Response:
    return Response(pydantic_core.to_json(body), status_code=status_code, media_type="application/json")
