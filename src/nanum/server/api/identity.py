"""Routes for bringing people in: bulk import (admin)."""

from __future__ import annotations

from fastapi import APIRouter

from nanum.server.auth import AdminDep, Context
from nanum.server.identity import ImportIn, ImportOut
from nanum.server.services import onboarding

router = APIRouter(tags=["accounts"])


@router.post("/users/import")
def import_users(body: ImportIn, ctx: Context, admin: AdminDep) -> ImportOut:
    """Create or update many users at once (name, Unix account, labs, role, email): each listed user ends with
    exactly what is listed; the same list again changes nothing. New users' tokens are in the reply only."""
    return onboarding.import_users(ctx, admin.name, body)
