"""The calls of the SDK on how the cluster is shared and watched: usage, reports and priorities; environments,
datasets and checkpoints; GPU use, the idle policy and where notices go.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanum.client._connection import Connection, segment

if TYPE_CHECKING:
    from nanum.jobfields import Job


class SharingCalls(Connection):
    """`Client`'s calls on usage, environments, datasets and monitoring."""

    # -- sharing ---------------------------------------------------------------------------------------------

    def usage(
        self,
        *,
        month: str | None = None,
        since: str | None = None,
        until: str | None = None,
        by: str | None = None,
        lab: str | None = None,
        user: str | None = None,
    ) -> dict[str, Any]:
        """GPU-hours, jobs, average wait and budget use over a month (`YYYY-MM`) or `since`/`until` (UTC dates or
        times; default this month), grouped `by` day, user or lab."""
        given = {"month": month, "since": since, "until": until, "by": by, "lab": lab, "user": user}
        params = [(k, v) for k, v in given.items() if v]
        return self._call("GET", "/usage", params=params).json()  # type: ignore[no-any-return]

    def trace(self, *, since: str | None = None, until: str | None = None) -> dict[str, Any]:
        """The store's jobs that started, submitted in [since, until) (UTC dates or times), as simulator trace rows,
        with the cluster and the server's policy."""
        params = [(k, v) for k, v in (("since", since), ("until", until)) if v]
        return self._call("GET", "/trace", params=params).json()  # type: ignore[no-any-return]

    def usage_report(self, *, since: str | None = None, until: str | None = None,
                     by: str | None = None) -> dict[str, Any]:
        """The usage report: used vs available, utilisation, idle-but-held, waits, lost work, budgets, top users."""
        params = [(k, v) for k, v in (("since", since), ("until", until), ("by", by)) if v]
        return self._call("GET", "/reports/usage", params=params).json()  # type: ignore[no-any-return]

    def priority(self, *, user: str | None = None, lab: str | None = None) -> dict[str, Any]:
        """Every pending job's priority and its factors, with its place in the queue."""
        params = [(k, v) for k, v in (("user", user), ("lab", lab)) if v]
        return self._call("GET", "/priority", params=params).json()  # type: ignore[no-any-return]

    def checkpoint(self, job_id: int) -> Job:
        """Tell the server a running job has just saved its state (a preemption then loses only later work)."""
        return self._call("POST", f"/jobs/{job_id}/checkpoint").json()  # type: ignore[no-any-return]

    # -- monitoring -----------------------------------------------------------------------------------------

    def environments(self) -> list[dict[str, Any]]:
        """The environments you may use (`nanum environment list`)."""
        return self._call("GET", "/environments").json()  # type: ignore[no-any-return]

    def environment(self, name: str) -> dict[str, Any]:
        return self._call("GET", f"/environments/{segment(name)}").json()  # type: ignore[no-any-return]

    def add_environment(self, name: str, **fields: Any) -> dict[str, Any]:
        """Add an environment: `image` (and `runtime`), or `python`, and/or `setup`; `description`, `lab`."""
        body = {"name": name, **{k: v for k, v in fields.items() if v is not None}}
        return self._call("POST", "/environments", json=body).json()  # type: ignore[no-any-return]

    def remove_environment(self, name: str) -> None:
        self._call("DELETE", f"/environments/{segment(name)}")

    def datasets(self) -> list[dict[str, Any]]:
        return self._call("GET", "/datasets").json()  # type: ignore[no-any-return]

    def add_dataset(self, name: str, path: str, **fields: Any) -> dict[str, Any]:
        body = {"name": name, "path": path, **{k: v for k, v in fields.items() if v is not None}}
        return self._call("POST", "/datasets", json=body).json()  # type: ignore[no-any-return]

    def remove_dataset(self, name: str) -> None:
        self._call("DELETE", f"/datasets/{segment(name)}")

    def checkpoints(self, job_id: int) -> dict[str, Any]:
        """The files in a job's checkpoint directory, with sizes and times."""
        return self._call("GET", f"/jobs/{job_id}/checkpoints").json()  # type: ignore[no-any-return]

    def job_usage(self, job_id: int) -> dict[str, Any]:
        """A job's GPU use: utilisation now and on average, idle state, timeline, efficiency summary once ended."""
        return self._call("GET", f"/jobs/{job_id}/usage").json()  # type: ignore[no-any-return]

    def idle_policy(self, lab: str | None = None) -> dict[str, Any]:
        """The idle policy in force (the server's, or a lab's) and the fields that layer sets itself."""
        return self._call("GET", f"/labs/{segment(lab)}/idle" if lab else "/monitoring/idle").json()  # type: ignore[no-any-return]

    def set_idle_policy(self, changes: dict[str, Any], lab: str | None = None) -> dict[str, Any]:
        """Change idle thresholds or windows (seconds; None: never; "inherit": the layer below) (admin)."""
        path = f"/labs/{segment(lab)}/idle" if lab else "/monitoring/idle"
        return self._call("PATCH", path, json=changes).json()  # type: ignore[no-any-return]

    def notify_settings(self) -> dict[str, Any]:
        return self._call("GET", "/monitoring/notify").json()  # type: ignore[no-any-return]

    def set_notify(self, **settings: Any) -> dict[str, Any]:
        """Webhook URL, dashboard URL and SMTP settings for notices about idle jobs (admin)."""
        return self._call("PATCH", "/monitoring/notify", json=settings).json()  # type: ignore[no-any-return]

    def set_contact(self, user: str, email: str | None = None, webhook: str | None = None) -> dict[str, Any]:
        """Where `user` hears about their jobs (themselves, or anyone as an admin)."""
        body = {"email": email, "webhook": webhook}
        return self._call("PUT", f"/users/{segment(user)}/contact", json=body).json()  # type: ignore[no-any-return]
