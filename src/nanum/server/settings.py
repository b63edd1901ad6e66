"""Server settings: where state lives, which database, and the knobs of the scheduler and the agent protocol."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nanum.core.fairshare import DEFAULT_HALF_LIFE
from nanum.core.policy import Policy
from nanum.store.db import sqlite_url

#: The core's default policy, so the server schedules as the simulator does unless told otherwise.
DEFAULT_POLICY = Policy.default().label


#: A group DN -> lab name rule when none is given: every group is a lab named by its cn.
DEFAULT_GROUP_LAB = r"^cn=([A-Za-z0-9][A-Za-z0-9._-]*),"


@dataclass(frozen=True, slots=True, kw_only=True)
class LdapSettings:
    """Where the directory is and how to read it (`nanum up --ldap-url ...`; nanum.server.directory)."""

    url: str
    base: str
    bind_dn: str | None = None
    bind_password: str | None = None
    #: A regular expression over a group's DN; its first group is the lab's name.
    group_lab: str = DEFAULT_GROUP_LAB
    #: How often a directory user's tokens and sessions are checked against the directory again (seconds).
    recheck_s: float = 300.0
    #: How long the token a password login hands out lasts.
    token_lifetime_s: float = 30 * 86400
    timeout_s: int = 10
    #: CA certificates (PEM) that an ldaps:// directory's certificate must chain to; None: not verified.
    ca_file: str | None = None


#: A group -> lab name rule for single sign-on when none is given: every group is a lab (Keycloak's group paths
#: start with a slash, which is dropped).
DEFAULT_OIDC_GROUP_LAB = r"^/?([A-Za-z0-9][A-Za-z0-9._-]*)$"


@dataclass(frozen=True, slots=True, kw_only=True)
class OidcSettings:
    """One OpenID Connect provider people log in with (`nanum up --oidc-issuer ...`; nanum.server.oidc)."""

    issuer: str
    client_id: str
    #: None for a public client (PKCE only).
    client_secret: str | None = None
    #: The claim that names the user here, the one that names their Unix account, and the one listing groups.
    username_claim: str = "preferred_username"
    unix_claim: str | None = None
    groups_claim: str = "groups"
    #: A regular expression over a group's name; its first group is the lab's name.
    group_lab: str = DEFAULT_OIDC_GROUP_LAB
    #: A regular expression over a group's name whose first group names a lab the person manages; None: none.
    manager_group: str | None = None
    #: How long the token a single sign-on from the command line hands out lasts.
    token_lifetime_s: float = 30 * 86400
    timeout_s: float = 10.0
    #: What the login page's button says: "Log in with <name>".
    name: str = "single sign-on"


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """`home` holds the SQLite database (unless `db_url` names another), job logs and checkpoints."""

    home: Path
    db_url: str | None = None
    allow_root_jobs: bool = False
    #: The scheduling policy, `ORDER[+PLACEMENT][+backfill|+nobackfill]...` (see `nanum.core.Policy`).
    policy: str = DEFAULT_POLICY
    estimate_depth: int = 50
    #: A node not heard from for this long gets no new jobs and is shown down.
    node_timeout_s: float = 60.0
    #: An agent whose heartbeats get no reply for this long stops its jobs (it learns this from every reply). A
    #: silent node's jobs are requeued only once its lease, their grace and a margin have passed
    #: (`requeue_after_s`), so a job never runs twice at once. Longer survives longer server outages.
    lease_s: float = 30.0
    #: The scheduler runs on every event and at least this often.
    tick_interval_s: float = 1.0
    #: Seconds between SIGTERM and SIGKILL when a job is stopped, for labs that do not set their own.
    grace_s: float = 60.0
    #: Fair-share usage counts half after this many seconds.
    half_life_s: float = DEFAULT_HALF_LIFE
    heartbeat_interval_s: float = 2.0
    #: Where jobs' checkpoint directories are (shared storage, so a requeued job finds its own on another node);
    #: None: HOME/checkpoints.
    checkpoint_root: Path | None = None
    #: How long a job's checkpoint directory is kept after it ended.
    checkpoint_retention_s: float = 7 * 86400.0
    #: Hosts webhooks may reach although they resolve to loopback, private or link-local addresses (lower case).
    webhook_allow_hosts: frozenset[str] = frozenset()
    #: The most of a job's output (stdout and stderr, per node) kept, on its node and here: a job that writes more
    #: is stopped. A runaway print loop wrote 4 GB in 8 s, into the node's state directory and then the server's.
    max_output_bytes: int = 1 << 30
    #: Most jobs one user may have waiting, held or running at once (Slurm's MaxSubmitJobs); more are refused.
    max_jobs_per_user: int = 20_000
    #: Whether `/metrics` (served without a token) names users and labs; off, it gives cluster totals only.
    metrics_names: bool = False
    #: A directory people log in to with their password; None: API tokens only.
    ldap: LdapSettings | None = None
    #: An OpenID Connect provider people log in with (single sign-on); None: none.
    oidc: OidcSettings | None = None

    @property
    def fence_margin_s(self) -> float:
        """Slack on top of a lease and a grace: a late SIGKILL, clocks that run at slightly different rates."""
        return max(2.0, self.lease_s / 3)

    def requeue_after_s(self, grace_s: float) -> float:
        """How long a node must be silent before its jobs with `grace_s` of grace are surely stopped: its agent
        (or the agent's guard) sent SIGTERM when the lease ran out and SIGKILL `grace_s` later."""
        return self.lease_s + grace_s + self.fence_margin_s

    @property
    def database_url(self) -> str:
        return self.db_url or sqlite_url(self.home)

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def checkpoints_dir(self) -> Path:
        return self.checkpoint_root or self.home / "checkpoints"
