"""The SQL schema: users, labs, memberships, nodes, jobs, allocations, events, monthly usage, run segments, audit.

Times are epoch seconds (floats) on every database, so SQLite and PostgreSQL behave alike; the API turns them into
ISO 8601. The schema itself is created by the Alembic migrations in `nanum.store.migrations`; these classes must
match them (a test compares the two).

Invariant kept by the database itself: `allocations` holds one row per GPU currently held by a job, with
UNIQUE (node_id, gpu_index), so no GPU can ever be held by two jobs; a job that needs no GPU on a node holds it with
one row whose GPU is NULL. Rows are deleted when the job's process on that node has exited.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


def table(row: type[Base]) -> Table:
    """`row`'s Core table, for bulk statements without the ORM's per-row cost (`Row.__table__` is typed as a
    plain FromClause)."""
    return cast(Table, row.__table__)


class LabRow(Base):
    """A lab: the unit of sharing. Limits are None when unlimited."""

    __tablename__ = "labs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    guaranteed_gpus: Mapped[int | None] = mapped_column(Integer)
    max_gpus: Mapped[int | None] = mapped_column(Integer)
    max_running_jobs: Mapped[int | None] = mapped_column(Integer)
    monthly_gpu_hours: Mapped[float | None] = mapped_column(Float)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    decayed_usage: Mapped[float] = mapped_column(Float, default=0.0)
    decayed_at: Mapped[float] = mapped_column(Float, default=0.0)
    created: Mapped[float] = mapped_column(Float)
    #: Seconds between SIGTERM and SIGKILL when one of the lab's jobs is stopped; None: the server's default.
    grace_s: Mapped[float | None] = mapped_column(Float)


class UserRow(Base):
    """A person (or robot) with an API token. Only the SHA-256 of the token is stored."""

    __tablename__ = "users"
    __table_args__ = (Index("uq_users_oidc", "oidc_issuer", "oidc_subject", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    unix_user: Mapped[str | None] = mapped_column(String(64))
    default_lab_id: Mapped[int | None] = mapped_column(ForeignKey("labs.id"))
    max_gpus: Mapped[int | None] = mapped_column(Integer)
    max_running_jobs: Mapped[int | None] = mapped_column(Integer)
    monthly_gpu_hours: Mapped[float | None] = mapped_column(Float)
    decayed_usage: Mapped[float] = mapped_column(Float, default=0.0)
    decayed_at: Mapped[float] = mapped_column(Float, default=0.0)
    created: Mapped[float] = mapped_column(Float)
    email: Mapped[str | None] = mapped_column(String(255))
    #: Where the user came from: None (added here) or `ldap` (made at their first directory login).
    source: Mapped[str | None] = mapped_column(String(16))
    #: The directory's uidNumber for the user's Unix account, when the directory gave one.
    uid_number: Mapped[int | None] = mapped_column(Integer)
    #: A disabled user's tokens and sessions are refused; their jobs stay, visible to admins.
    disabled: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    #: For a user made at a single sign-on (`source` oidc): the provider (`iss`) and who they are there (`sub`).
    #: A login is matched by these two, never by name alone.
    oidc_issuer: Mapped[str | None] = mapped_column(String(255))
    oidc_subject: Mapped[str | None] = mapped_column(String(255))


class MembershipRow(Base):
    """A user in a lab, as a `member` or as a `manager` (who manages the lab's members and jobs)."""

    __tablename__ = "memberships"

    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    lab_id: Mapped[int] = mapped_column(ForeignKey("labs.id", ondelete="CASCADE"), primary_key=True)
    role: Mapped[str] = mapped_column(String(16), default="member", server_default="member")


class TokenRow(Base):
    """One more API token of a user (their first is `users.token_hash`): a name, and an expiry (None: never)."""

    __tablename__ = "tokens"
    __table_args__ = (Index("ix_tokens_user", "user_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(64))
    created: Mapped[float] = mapped_column(Float)
    expires: Mapped[float | None] = mapped_column(Float)
    last_used: Mapped[float | None] = mapped_column(Float)


class NodeRow(Base):
    """A GPU machine. `inventory` is the agent's last `NodeInfo` (GPUs, CPUs, memory), less GPUs that were never
    accepted; None until it reports.

    `state` is what the server last concluded: `up` (heard from recently), `down` (silent), `draining`
    (an admin keeps new jobs off it). `desired_version` grows whenever the jobs the node should run change, so a
    server holding a node's long poll can notice a change made by another server."""

    __tablename__ = "nodes"
    __table_args__ = ({"postgresql_with": {"fillfactor": 50}},)  # `last_seen` rewritten in place (migration 0024)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    token_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    hostname: Mapped[str | None] = mapped_column(String(255))
    inventory: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    state: Mapped[str] = mapped_column(String(16), default="down")
    last_seen: Mapped[float | None] = mapped_column(Float)
    desired_version: Mapped[int] = mapped_column(Integer, default=0)
    #: The GPUs ({index, uuid, model}) the node was taken into service with: from its first heartbeat, or an
    #: admin's `nanum node accept`. Only reported GPUs among these are in `inventory` (nanum.server.services.inventory).
    accepted_gpus: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON(none_as_null=True))
    #: GPUs the last heartbeat reported beyond the accepted ones: shown, never scheduled. None: there are none.
    unaccepted_gpus: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON(none_as_null=True))
    created: Mapped[float] = mapped_column(Float)
    #: The lab that owns the node (its jobs come first; others borrow it while idle); None: the shared pool.
    owner: Mapped[str | None] = mapped_column(String(64))
    #: `{key: value}` labels an admin set; jobs' `--constraint key=value` match them.
    labels: Mapped[dict[str, str] | None] = mapped_column(JSON(none_as_null=True))
    #: An admin's name for the node's GPU model, replacing what its agent reports; None: the agent's.
    gpu_model: Mapped[str | None] = mapped_column(String(64))
    #: Why new jobs are kept off the node (an admin's drain, or a GPU health problem); None: not drained.
    drain_reason: Mapped[str | None] = mapped_column(Text)
    #: GPUs out of service for a health problem: `{index: {"problem", "since"}}`, until an admin resumes the node.
    gpu_health: Mapped[dict[str, dict[str, Any]] | None] = mapped_column(JSON(none_as_null=True))


#: The jobs `ix_jobs_paths` holds (those with a Python environment or datasets).
JOB_PATHS = "environment_spec IS NOT NULL OR datasets IS NOT NULL"


class JobRow(Base):
    """A job: the submitted request, its state and its history in numbers.

    `stop` is why a running job is being stopped (`cancel`, `preempt`, `lost`, `fail`, `timeout`): it is no longer
    in its nodes' desired lists, and it reaches its final state once every node has reported its process gone.
    `allocation` is the last placement, `[{"node", "gpus"}]`, kept after the job ends so people can see where it
    ran. `charged_until` is when the current run was last charged to its lab's usage. `lost_from` remembers the
    placement of a job requeued because its node went silent, so the job is kept if that node comes back still
    running it."""

    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_state_end", "state", "end_time"),
        Index("ix_jobs_user_state", "user_id", "state"),
        Index("ix_jobs_user_submit", "user_id", "submit_time"),  # a new job's burst: its user's latest jobs
        UniqueConstraint("user_id", "client_request_id", name="uq_jobs_user_request"),
        Index("ix_jobs_array", "array_id", "array_task"),
        Index("ix_jobs_rev", "rev"),
        # a job that ends looks for the queued jobs that depend on it: few, however long the queue
        Index("ix_jobs_dependent", "state", "id", postgresql_where=text('"after" IS NOT NULL'),
              sqlite_where=text('"after" IS NOT NULL')),
        # the paths agents look for: those of the queued and running jobs with an environment or datasets
        Index("ix_jobs_paths", "state", postgresql_where=text(JOB_PATHS), sqlite_where=text(JOB_PATHS)),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    lab_id: Mapped[int] = mapped_column(ForeignKey("labs.id"))
    command: Mapped[list[str]] = mapped_column(JSON)
    workdir: Mapped[str] = mapped_column(Text)
    env: Mapped[dict[str, str]] = mapped_column(JSON)
    gpus: Mapped[int] = mapped_column(Integer)
    nodes: Mapped[int] = mapped_column(Integer, default=1)
    gpu_model: Mapped[str | None] = mapped_column(String(64))
    cpus: Mapped[int] = mapped_column(Integer, default=1)
    memory_mb: Mapped[int | None] = mapped_column(Integer)
    time_limit_s: Mapped[float | None] = mapped_column(Float)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    #: 0..9, set by admins only: every queue order puts a higher tier first (nanum.core.ordering).
    tier: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    kind: Mapped[str] = mapped_column(String(16), default="batch")
    preemptible: Mapped[bool] = mapped_column(Boolean, default=True)
    state: Mapped[str] = mapped_column(String(16), default="pending")
    reason: Mapped[str | None] = mapped_column(Text)
    reason_code: Mapped[str | None] = mapped_column(String(32))
    estimated_start: Mapped[float | None] = mapped_column(Float)
    borrowing: Mapped[bool] = mapped_column(Boolean, default=False)
    #: started on GPUs reserved for a blocked job, which preempts it when it can start (nanum.core.scheduler).
    over_reservation: Mapped[bool] = mapped_column(Boolean, default=False)
    stop: Mapped[str | None] = mapped_column(String(16))
    allocation: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    lost_from: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON(none_as_null=True))
    charged_until: Mapped[float | None] = mapped_column(Float)
    submit_time: Mapped[float] = mapped_column(Float)
    start_time: Mapped[float | None] = mapped_column(Float)
    end_time: Mapped[float | None] = mapped_column(Float)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    runs: Mapped[int] = mapped_column(Integer, default=0)
    attained_gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    #: When the job last saved its state (its agent saw `$NANUM_CHECKPOINT_DIR/.checkpoint` change); None: never.
    last_checkpoint: Mapped[float | None] = mapped_column(Float)
    #: GPU-seconds of work since the last checkpoint thrown away by preemptions.
    lost_gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    preemptions: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: When the job last entered the queue (requeued after a preemption); None: its submit time.
    queued_at: Mapped[float | None] = mapped_column(Float)
    #: The first job of the burst it was submitted in (nanum.core.bursts); None: it is that first job, or alone.
    burst: Mapped[int | None] = mapped_column(Integer)
    #: Written by the database on every insert and update of the row (triggers of migration 0019), never by nanum:
    #: a write counter on SQLite, the writing transaction's id on PostgreSQL. The scheduler reads only the rows
    #: written since its last tick (`nanum.server.jobrows`). A migration that rebuilds this table on SQLite (batch
    #: mode) drops the triggers and must create them again (`nanum.store.revs`).
    rev: Mapped[int] = mapped_column(BigInteger, server_default="0")
    #: The id the client gave its submission, unique per user: sent again, it returns this job (idempotency).
    client_request_id: Mapped[str | None] = mapped_column(String(64))
    #: An array task: its array's id (the first task's job id), its index, and how many tasks may run at once.
    array_id: Mapped[int | None] = mapped_column(Integer)
    array_task: Mapped[int | None] = mapped_column(Integer)
    array_limit: Mapped[int | None] = mapped_column(Integer)
    #: The jobs it waits for: `[[kind, "ID" or "ID_TASK"], ...]`, kind started, ok, failed or any
    #: (nanum.server.services.eligibility); None: none.
    after: Mapped[list[list[str]] | None] = mapped_column(JSON(none_as_null=True))
    #: Kept pending (not cancelled) when a job it waits for can no longer satisfy it.
    keep_if_unmet: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    #: Queued again when a node it runs on is lost (False: it fails instead; `--no-requeue`).
    requeue: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    #: How many more times it is requeued when a run fails.
    retries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: Each ended run's exit code (None: it had none), in order.
    exits: Mapped[list[int | None] | None] = mapped_column(JSON(none_as_null=True))
    #: The environment it runs in, by name (nanum.store.environments); None: the node's own.
    environment: Mapped[str | None] = mapped_column(String(64))
    #: That environment as it was at submit (`image`, `runtime`, `python`, `setup`): what its launches use.
    environment_spec: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    #: The datasets it reads: name -> path on the nodes (None: none).
    datasets: Mapped[dict[str, str] | None] = mapped_column(JSON(none_as_null=True))
    #: The least memory per GPU (MiB) the job accepts; None: any.
    gpu_memory_mb: Mapped[int | None] = mapped_column(Integer)
    #: Node labels the job needs, `["key=value", ...]`; None: none.
    constraints: Mapped[list[str] | None] = mapped_column(JSON(none_as_null=True))
    #: Each node's part runs the command under torchrun, with the rendezvous filled in.
    torchrun: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    #: Notebooks and shells: the secret the server reaches the job's JupyterLab with (its token), or that the
    #: shell's relay shows to connect; never shown to anyone. None for batch jobs.
    session_secret: Mapped[str | None] = mapped_column(String(64))
    #: A notebook's `HOST:PORT` as its agent reported it; None until JupyterLab was started.
    session_address: Mapped[str | None] = mapped_column(String(255))


class AllocationRow(Base):
    """One GPU held by one job, or (gpu_index None) a node where a job that needs no GPU runs.
    UNIQUE (node_id, gpu_index): a GPU is never held twice (NULLs are distinct, so CPU-only jobs share a node)."""

    __tablename__ = "allocations"
    __table_args__ = (UniqueConstraint("node_id", "gpu_index", name="uq_allocations_gpu"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    gpu_index: Mapped[int | None] = mapped_column(Integer)


class EventRow(Base):
    """A job's history: submitted, started, preempted, lost, recovered, cancel requested, ended."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    time: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text, default="")


class UsageRow(Base):
    """GPU-seconds used per lab or user (`kind`) and calendar month (`2026-11`), charged when a run ends.
    The same seconds as the `segments` of that month: this table answers budgets quickly, segments any window."""

    __tablename__ = "usage"

    month: Mapped[str] = mapped_column(String(7), primary_key=True)
    kind: Mapped[str] = mapped_column(String(8), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)


class SegmentRow(Base):
    """One charged interval of a job's allocation: `gpus` GPUs (all nodes together) from `start` to `end`.

    A run makes one segment when it ends (or two, when its node went silent and came back). `wait_s` is the time
    the job waited in the queue before this run (None for the second part of a recovered run); `outcome` is what
    ended it (completed, failed, cancelled, timeout, preempted, lost); `lost_gpu_seconds` the work since the last
    checkpoint that a preemption threw away. Usage over any window is the sum of the segments clipped to it.

    A heartbeat only inserts segments (`settled` false); the scheduling leader adds them to their labs' and users'
    decayed usage and monthly usage at its next tick and marks them settled (`nanum.server.services.charging`), so
    no heartbeat waits on a row that every job of a lab shares."""

    __tablename__ = "segments"
    __table_args__ = (
        Index("ix_segments_unsettled", "id", postgresql_where=text("NOT settled"), sqlite_where=text("NOT settled")),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    lab_id: Mapped[int] = mapped_column(ForeignKey("labs.id"))
    gpus: Mapped[int] = mapped_column(Integer)
    start: Mapped[float] = mapped_column(Float)
    end: Mapped[float] = mapped_column(Float, index=True)
    wait_s: Mapped[float | None] = mapped_column(Float)
    outcome: Mapped[str] = mapped_column(String(16))
    lost_gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    settled: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class AuditRow(Base):
    """Who changed what, when: a lab's or user's (`kind`) quota set by `actor`, a budget warning (actor
    `nanum`), or a node's GPUs: reported beyond those accepted (`mismatch`, actor `nanum`), or accepted by an
    admin. `changes` maps each field to `[old, new]` (for warnings: month, level and figures)."""

    __tablename__ = "audit"
    __table_args__ = (Index("ix_audit_subject", "kind", "name", "time"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    time: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(8))
    name: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(16))
    changes: Mapped[dict[str, Any]] = mapped_column(JSON)
    message: Mapped[str] = mapped_column(Text, default="")
