"""Liveness: `GET /api/v1/health` answers without a token."""

from __future__ import annotations

from fastapi import APIRouter

from nanum import __version__
from nanum.server.inputs import KnownQuery
from nanum.server.schemas import Health

router = APIRouter(tags=["health"], route_class=KnownQuery)


@router.get("/health")
async def health() -> Health:
    return Health(version=__version__)
