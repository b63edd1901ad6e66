"""The request and response bodies for who people are: lab memberships and their roles, member limits, API
tokens, bulk imports and password logins (docs/api.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from nanum.server.inputs import ApiIn
from nanum.server.schemas import GpuHours, Quota

Role = Literal["member", "manager"]


class MemberIn(ApiIn):
    """Add a user to a lab (or change their role in it). Only an admin may make someone a manager."""

    role: Role = "member"


class MemberOut(BaseModel):
    lab: str
    user: str
    role: str
    unix_user: str | None
    max_gpus: int | None = None
    max_running_jobs: int | None = None
    monthly_gpu_hours: float | None = None


class MemberLimits(ApiIn):
    """A member's own limits, within their lab's. Only the fields present change; an explicit null removes one
    (refused where the lab itself has that limit)."""

    max_gpus: Quota | None = None
    max_running_jobs: Quota | None = None
    monthly_gpu_hours: GpuHours | None = None

