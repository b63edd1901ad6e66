"""Liveness: `GET /api/v1/health` answers without a token."""

from __future__ import annotations

from fastapi import APIRouter

from nanum import __version__
from nanum.server.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/health")
async def health() -> Health:
    return Health(version=__version__)
