"""The calls of the SDK on the cluster and its people: nodes, users, labs and their members, logins and tokens.

Most of them are an admin's (or a lab manager's); each says so where the server refuses others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nanum.client._connection import Connection, segment
from nanum.client._objects import Lab, Me, NewToken, Node


class ClusterCalls(Connection):
    """`Client`'s calls on nodes, users, labs, logins and tokens."""

    def nodes(self) -> list[Node]:
        return self._call("GET", "/nodes").json()  # type: ignore[no-any-return]

    def node(self, name: str) -> dict[str, Any]:
        """One node as `nodes()` has it, with its history: drains, resumes and removals with their reasons, GPUs
        taken out of service with the evidence, owner, label and model changes."""
        return self._call("GET", f"/nodes/{segment(name)}").json()  # type: ignore[no-any-return]

    def accept_node(self, name: str) -> Node:
        """Schedule the GPUs a node reports beyond those it was accepted with (admin)."""
        return self._call("POST", f"/nodes/{segment(name)}/accept").json()  # type: ignore[no-any-return]

    def set_node(self, name: str, *, owner: str | None = None, labels: Sequence[str] = (),
                 gpu_model: str | None = None) -> Node:
        """Set a node's owner lab ("" for none), labels (`key=value`; `key=` removes one) or GPU model name ("" for
        the one its agent reports) (admin)."""
        body = {"owner": owner, "labels": list(labels), "gpu_model": gpu_model}
        return self._call("PATCH", f"/nodes/{segment(name)}", json=body).json()  # type: ignore[no-any-return]

    def drain_node(self, name: str, reason: str | None = None) -> Node:
        """Keep new jobs off a node; its running jobs finish (admin)."""
        return self._call("POST", f"/nodes/{segment(name)}/drain", json={"reason": reason}).json()  # type: ignore[no-any-return]

    def resume_node(self, name: str, reason: str | None = None) -> Node:
        """End a node's drain and return its GPUs taken out of service for health problems (admin); `reason` goes
        into the node's history."""
        return self._call("POST", f"/nodes/{segment(name)}/resume", json={"reason": reason}).json()  # type: ignore[no-any-return]

    def remove_node(self, name: str, reason: str | None = None) -> None:
        """Forget a node; its agent's token stops working (admin). The history under its name keeps `reason`."""
        self._call("DELETE", f"/nodes/{segment(name)}", params={"reason": reason} if reason else None)

    def add_node(self, name: str) -> NewToken:
        """Register a node (admin); the token is what `nanum agent --token-file FILE` reads."""
        return self._call("POST", "/nodes", json={"name": name}).json()  # type: ignore[no-any-return]

    def me(self) -> Me:
        return self._call("GET", "/me").json()  # type: ignore[no-any-return]

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health").json()  # type: ignore[no-any-return]

    def users(self) -> list[dict[str, Any]]:
        return self._call("GET", "/users").json()  # type: ignore[no-any-return]

    def add_user(
        self, name: str, labs: Sequence[str] = (), *, admin: bool = False, unix_user: str | None = None
    ) -> NewToken:
        """Create a user (admin); the first lab is the user's default and labs are created if missing."""
        body = {"name": name, "labs": list(labs), "admin": admin, "unix_user": unix_user}
        return self._call("POST", "/users", json=body).json()  # type: ignore[no-any-return]

    def labs(self) -> list[Lab]:
        return self._call("GET", "/labs").json()  # type: ignore[no-any-return]

    def add_lab(self, name: str, **quota: Any) -> Lab:
        """Create a lab (admin) with optional `guaranteed_gpus`, `max_gpus`, `max_running_jobs`,
        `monthly_gpu_hours`, `weight`."""
        return self._call("POST", "/labs", json={"name": name, **quota}).json()  # type: ignore[no-any-return]

    def lab(self, name: str) -> dict[str, Any]:
        """One lab: quota, members, jobs and GPUs now, this month's usage and budget, lost work, quota history."""
        return self._call("GET", f"/labs/{segment(name)}").json()  # type: ignore[no-any-return]

    def set_lab(self, name: str, **quota: Any) -> Lab:
        """Change a lab's quota (admin): only the fields given change; None removes a limit."""
        return self._call("PATCH", f"/labs/{segment(name)}", json=quota).json()  # type: ignore[no-any-return]

    def set_user(self, name: str, **limits: Any) -> dict[str, Any]:
        """Set a user's own `max_gpus`, `max_running_jobs`, `monthly_gpu_hours` (admin); None removes one."""
        return self._call("PATCH", f"/users/{segment(name)}", json=limits).json()  # type: ignore[no-any-return]

    def import_users(self, users: list[dict[str, Any]], *, dry_run: bool = False) -> dict[str, Any]:
        """Create or update many users (admin): each ends with exactly the listed `labs`, `role` (member,
        manager, admin), `unix_user` and `email`. The report lists what was created (with tokens) and changed."""
        body = {"users": users, "dry_run": dry_run}
        return self._call("POST", "/users/import", json=body).json()  # type: ignore[no-any-return]

    def auth_methods(self) -> dict[str, Any]:
        """How this server lets people log in (no token needed): `token` always, `password` with a directory."""
        return self._call("GET", "/auth").json()  # type: ignore[no-any-return]

    def password_login(self, username: str, password: str, token_name: str = "login") -> dict[str, Any]:
        """Log in with a directory name and password (no token needed); the reply holds a new API token
        (`token`, expiring at `expires`), the user's `name`, `unix_user` and `labs`."""
        body = {"username": username, "password": password, "token_name": token_name}
        return self._call("POST", "/login", json=body).json()  # type: ignore[no-any-return]

    def set_user_disabled(self, name: str, disabled: bool) -> dict[str, Any]:
        """Disable a user (admin), or enable them again."""
        verb = "disable" if disabled else "enable"
        return self._call("POST", f"/users/{segment(name)}/{verb}").json()  # type: ignore[no-any-return]

    def oidc_login(self, id_token: str, token_name: str = "login") -> dict[str, Any]:
        """Trade an ID token from the server's single sign-on provider for an API token (no token needed); the
        reply is as `password_login`'s."""
        body = {"id_token": id_token, "token_name": token_name}
        return self._call("POST", "/login/oidc", json=body).json()  # type: ignore[no-any-return]

    def tokens(self, user: str | None = None) -> list[dict[str, Any]]:
        """Your API tokens (an admin: `user`'s), never their values; id 0 is the first token."""
        params = {"user": user} if user else None
        return self._call("GET", "/tokens", params=params).json()  # type: ignore[no-any-return]

    def create_token(self, name: str, expires_in_s: float | None = None) -> dict[str, Any]:
        """A new token for yourself; its value (`token`) is in this reply only."""
        body = {"name": name, "expires_in_s": expires_in_s}
        return self._call("POST", "/tokens", json=body).json()  # type: ignore[no-any-return]

    def revoke_token(self, token_id: int, user: str | None = None) -> None:
        """Revoke one of your tokens (an admin: `user`'s) at once."""
        self._call("DELETE", f"/tokens/{token_id}", params={"user": user} if user else None)

    def lab_members(self, lab: str) -> list[dict[str, Any]]:
        """A lab's members with their roles and limits (its managers and admins)."""
        return self._call("GET", f"/labs/{segment(lab)}/members").json()  # type: ignore[no-any-return]

    def put_member(self, lab: str, user: str, role: str = "member") -> dict[str, Any]:
        """Add an existing user to a lab or change their role there (a manager of the lab, or an admin; only an
        admin makes a `manager`)."""
        return self._call("PUT", f"/labs/{segment(lab)}/members/{segment(user)}", json={"role": role}).json()  # type: ignore[no-any-return]

    def remove_member(self, lab: str, user: str) -> None:
        """Take a user out of a lab (its managers, admins); their jobs stay."""
        self._call("DELETE", f"/labs/{segment(lab)}/members/{segment(user)}")

    def set_member_limits(self, lab: str, user: str, **limits: Any) -> dict[str, Any]:
        """A member's own `max_gpus`, `max_running_jobs`, `monthly_gpu_hours`, within the lab's (its managers,
        admins); None removes one."""
        return self._call("PATCH", f"/labs/{segment(lab)}/members/{segment(user)}", json=limits).json()  # type: ignore[no-any-return]
