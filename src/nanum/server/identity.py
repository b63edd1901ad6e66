"""The request and response bodies for who people are: lab memberships and their roles, member limits, API
tokens, bulk imports and password logins (docs/api.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

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



ImportRole = Literal["member", "manager", "admin"]


class ImportedUser(ApiIn):
    """One person of a bulk import: the user as they should be after it."""

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    unix_user: str | None = Field(default=None, min_length=1, max_length=64)
    labs: list[Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]] = Field(
        default_factory=list, max_length=256)
    #: `manager`: of every lab listed; `admin`: an admin (and a member of the labs listed).
    role: ImportRole = "member"
    email: str | None = Field(default=None, max_length=255)


class ImportIn(ApiIn):
    """The people to create or bring up to date. Each listed user ends with exactly these labs, role, Unix
    account and email; users not listed are left alone. `dry_run`: report what would change, change nothing."""

    users: list[ImportedUser] = Field(max_length=10_000)
    dry_run: bool = False


class ImportedChange(BaseModel):
    name: str
    #: field -> [before, after]; `labs` as sorted lists, `role` as member/manager/admin.
    changes: dict[str, list[Any]]
    #: the new user's API token (shown only here); None for users that existed.
    token: str | None = None


class ImportOut(BaseModel):
    created: list[ImportedChange]
    changed: list[ImportedChange]
    unchanged: list[str]
    dry_run: bool


class TokenIn(ApiIn):
    """A new API token for yourself: a name to know it by, and how long it lasts (None: until revoked)."""

    name: Annotated[str, Field(min_length=1, max_length=64)]
    expires_in_s: float | None = Field(default=None, gt=0, le=10 * 365 * 86400)


class TokenInfo(BaseModel):
    """One API token of a user (never its value); times in ISO 8601 UTC, `expires` null: until revoked."""

    id: int
    name: str
    created: str | None
    expires: str | None
    last_used: str | None


class TokenNew(TokenInfo):
    """A token just made: its value is shown only here."""

    token: str
    last_used: str | None = None


class LoginIn(ApiIn):
    """A directory name and password; `token_name` names the token handed out (e.g. `login on laptop`)."""

    username: Annotated[str, Field(min_length=1, max_length=64)]
    password: Annotated[str, Field(max_length=1024)]
    token_name: Annotated[str, Field(min_length=1, max_length=64)] = "login"


class LoginOut(BaseModel):
    """Who logged in, and their new API token (shown only here) with when it expires."""

    name: str
    unix_user: str
    labs: list[str]
    token: str
    expires: str | None


class OidcInfo(BaseModel):
    """The single sign-on provider: `nanum login --oidc` asks it for an ID token as this client."""

    issuer: str
    client_id: str
    name: str


class AuthMethods(BaseModel):
    token: bool
    password: bool
    directory: str | None
    oidc: OidcInfo | None = None


class OidcLoginIn(ApiIn):
    """An ID token from the server's single sign-on provider (e.g. from the device flow of `nanum login --oidc`);
    `token_name` names the API token handed out for it."""

    id_token: Annotated[str, Field(min_length=1, max_length=16_384)]
    token_name: Annotated[str, Field(min_length=1, max_length=64)] = "login"
