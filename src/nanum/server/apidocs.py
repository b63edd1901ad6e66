"""/docs: the API's Swagger UI, served from the fastapi-offline package's copy, so it works with no internet.

FastAPI's own /docs loads Swagger UI from a CDN, which a cluster behind a firewall cannot reach (a blank page).
Here the page, its script and its stylesheet all come from this server; the page starts Swagger UI from a
small script file rather than an inline one, so it keeps the dashboard's same-origin Content-Security-Policy.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel

ASSETS = "/docs/assets"
#: Swagger UI's script and stylesheet (a release that reads OpenAPI 3.1, which FastAPI publishes).
STATIC = Path(fastapi_offline.__file__).parent / "static"

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title} API</title>
<link rel="stylesheet" href="{assets}/swagger-ui.css">
<link rel="icon" href="/static/favicon.svg">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{assets}/swagger-ui-bundle.js"></script>
<script src="/docs/start.js"></script>
</body>
</html>
"""

_START = """window.ui = SwaggerUIBundle({url: %s, dom_id: "#swagger-ui", deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis], layout: "BaseLayout"});
"""

_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
}


def install(app: FastAPI) -> None:
    """Serve /docs and its assets from this server (create the app with `docs_url=None, redoc_url=None`)."""
    page = _PAGE.format(title=html.escape(app.title), assets=ASSETS)
    start = _START % json.dumps(app.openapi_url)
    app.mount(ASSETS, StaticFiles(directory=STATIC), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(page, headers=_HEADERS)

    @app.get("/docs/start.js", include_in_schema=False)
    async def docs_start() -> Response:
        return Response(start, media_type="text/javascript", headers=_HEADERS)


def publish_models(app: FastAPI, models: Sequence[type[BaseModel]]) -> None:
    """Publish the schemas of request bodies that routes read themselves (their `openapi_extra` refers to them
    as `#/components/schemas/NAME`): FastAPI publishes only the models it reads."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schemas = generate().setdefault("components", {}).setdefault("schemas", {})
            for model in models:
                schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
                for name, part in schema.pop("$defs", {}).items():
                    schemas.setdefault(name, part)
                schemas.setdefault(model.__name__, schema)
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]
