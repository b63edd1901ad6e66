"""Routes for a lab's members: list, add (or change a role), remove, and set a member's limits. For the lab's
managers and admins (nanum.server.services.members)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from nanum.server.auth import CallerDep, Context
from nanum.server.identity import MemberIn, MemberLimits, MemberOut
from nanum.server.inputs import KnownQuery
from nanum.server.services import members

router = APIRouter(prefix="/labs/{lab}/members", tags=["accounts"], route_class=KnownQuery)


@router.get("")
def list_members(lab: str, ctx: Context, caller: CallerDep) -> list[MemberOut]:
    """The lab's members with their roles and limits."""
    return members.list_members(ctx, caller, lab)


@router.put("/{user}")
def put_member(lab: str, user: str, body: MemberIn, ctx: Context, caller: CallerDep) -> MemberOut:
    """Add an existing user to the lab, or change their role (only an admin makes or unmakes a manager)."""
    return members.put_member(ctx, caller, lab, user, body.role)


@router.delete("/{user}", status_code=204)
def remove_member(lab: str, user: str, ctx: Context, caller: CallerDep) -> Response:
    """Take a user out of the lab; their jobs stay."""
    members.remove_member(ctx, caller, lab, user)
    return Response(status_code=204)


@router.patch("/{user}")
def set_member_limits(lab: str, user: str, body: MemberLimits, ctx: Context, caller: CallerDep) -> MemberOut:
    """A member's own limits, each at most the lab's; refused to a manager when the member is also in a lab
    that manager does not manage."""
    return members.set_limits(ctx, caller, lab, user, body)
