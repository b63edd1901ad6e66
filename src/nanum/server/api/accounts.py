"""Routes for people and labs: who am I, users (admin), labs."""

from __future__ import annotations

from fastapi import APIRouter

from nanum.server.auth import AdminDep, CallerDep, Context
from nanum.server.inputs import KnownQuery
from nanum.server.schemas import LabIn, LabOut, LabPatch, TokenOut, UserIn, UserOut
from nanum.server.services import accounts

router = APIRouter(tags=["accounts"], route_class=KnownQuery)


@router.get("/me")
def me(caller: CallerDep) -> UserOut:
    return accounts.user_out(caller)


@router.post("/users", status_code=201)
def create_user(body: UserIn, ctx: Context, _: AdminDep) -> TokenOut:
    """Create a user and return their API token (shown only here). Labs named are created if missing."""
    return TokenOut(name=body.name, token=accounts.create_user(ctx, body))


@router.get("/users")
def list_users(ctx: Context, _: AdminDep) -> list[UserOut]:
    return accounts.list_users(ctx)


@router.post("/labs", status_code=201)
def create_lab(body: LabIn, ctx: Context, admin: AdminDep) -> LabOut:
    return accounts.create_lab(ctx, body, admin.name)


@router.get("/labs")
def list_labs(ctx: Context, _: CallerDep) -> list[LabOut]:
    return accounts.list_labs(ctx)


@router.patch("/labs/{name}")
def patch_lab(name: str, body: LabPatch, ctx: Context, admin: AdminDep) -> LabOut:
    """Change a lab's quota; only the fields given change (null removes a limit). Recorded with who and when;
    applies at the next scheduling cycle."""
    return accounts.patch_lab(ctx, name, body, admin.name)
