"""Quotas: hard limits, guarantees and borrowing, budgets, and the order in which borrowers are reclaimed.

All quota arithmetic lives here. `Usage` counts the GPUs and running jobs per lab and per user as the cycle starts
jobs, so each check sees the starts already decided in this cycle.

A lab with `guaranteed_gpus` set runs up to that many GPUs as owner; jobs beyond it are *borrowing*: they run only
on GPUs nobody entitled wants, only if preemptible, and are the first reclaimed. A lab without a guarantee (None)
takes no part in lending: its jobs never borrow and are never reclaimed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import islice

from nanum.core.decision import Code, Reason, gpus
from nanum.core.model import Job, Lab, Limits, Node, Running, Snapshot, User, serves, takes_model

NO_LIMITS = Limits()
INF = float("inf")


@dataclass(slots=True)
class Usage:
    lab_gpus: Counter[str] = field(default_factory=Counter)
    lab_jobs: Counter[str] = field(default_factory=Counter)
    user_gpus: Counter[str] = field(default_factory=Counter)
    user_jobs: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, running: tuple[Running, ...]) -> Usage:
        """What `add` of every running job gives (the same counts, keys in the same order), in one pass."""
        jobs = [run.job for run in running]
        lab_gpus: Counter[str] = Counter()
        user_gpus: Counter[str] = Counter()
        for job in jobs:
            gpus = job.gpus * job.nodes
            lab_gpus[job.lab] += gpus
            user_gpus[job.user] += gpus
        return cls(lab_gpus, Counter(job.lab for job in jobs), user_gpus, Counter(job.user for job in jobs))

    def add(self, job: Job, sign: int = 1) -> None:
        self.lab_gpus[job.lab] += sign * job.total_gpus
        self.lab_jobs[job.lab] += sign
        self.user_gpus[job.user] += sign * job.total_gpus
        self.user_jobs[job.user] += sign


def _limit_reason(kind: str, name: str, limits: Limits, gpus: int, jobs: int, job: Job) -> str | None:
    if limits.max_gpus is not None and gpus + job.total_gpus > limits.max_gpus:
        return f"{kind} {name} is at max_gpus {limits.max_gpus} ({gpus} in use, this job needs {job.total_gpus})"
    if limits.max_running_jobs is not None and jobs + 1 > limits.max_running_jobs:
        return f"{kind} {name} is at max_running_jobs {limits.max_running_jobs}"
    return None


def _budget_reason(kind: str, name: str, limits: Limits, used: float, month: str) -> str | None:
    budget = limits.monthly_gpu_hours
    if budget is not None and used >= budget:
        return f"{kind} {name} has used its {_hours(budget, 0)} GPU-hours for {month} ({_hours(used, 1)} used)"
    return None


def _hours(value: float, decimals: int) -> str:
    """`1,000` and `1,000.5` for large figures; three significant digits below 10 (`0.5`, `0.0123`)."""
    return f"{value:,.{decimals}f}" if value >= 10 else f"{value:.3g}"


def admit(
    job: Job, usage: Usage, labs: Mapping[str, Lab], users: Mapping[str, User], month: str
) -> Reason | None:
    """Why `job` may not start now whatever the free GPUs, or None. Budgets first, then lab, then user limits."""
    lab, user = labs.get(job.lab), users.get(job.user)
    if lab is not None and (why := _budget_reason("lab", lab.name, lab.limits, lab.used_gpu_hours, month)):
        return Reason(Code.BUDGET, why)
    if user is not None and (why := _budget_reason("user", user.name, user.limits, user.used_gpu_hours, month)):
        return Reason(Code.BUDGET, why)
    if lab is not None and (
        why := _limit_reason("lab", lab.name, lab.limits, usage.lab_gpus[job.lab], usage.lab_jobs[job.lab], job)
    ):
        return Reason(Code.LAB_LIMIT, why)
    if user is not None and (
        why := _limit_reason(
            "user", user.name, user.limits, usage.user_gpus[job.user], usage.user_jobs[job.user], job
        )
    ):
        return Reason(Code.USER_LIMIT, why)
    return None


class Admission:
    """`admit` for one cycle's labs and users: only those with a limit or budget are kept, and a used-up budget's
    reason is written once, so a long queue pays a lookup or two per job. Gives what `admit` gives for any job."""

    def __init__(self, labs: Mapping[str, Lab], users: Mapping[str, User], month: str) -> None:
        self._labs = {key: _Rules.of("lab", lab.name, lab.limits, lab.used_gpu_hours, month)
                      for key, lab in labs.items() if lab.limits != NO_LIMITS}
        self._users = {key: _Rules.of("user", user.name, user.limits, user.used_gpu_hours, month)
                       for key, user in users.items() if user.limits != NO_LIMITS}

    @classmethod
    def of(cls, snapshot: Snapshot) -> Admission:
        return cls(snapshot.labs, snapshot.users, snapshot.month)

    def refuse(self, job: Job, usage: Usage) -> Reason | None:
        """`admit(job, usage, ...)`: budgets first, then lab, then user limits."""
        lab, user = self._labs.get(job.lab), self._users.get(job.user)
        if lab is None and user is None:
            return None
        if lab is not None and lab.budget is not None:
            return lab.budget
        if user is not None and user.budget is not None:
            return user.budget
        gpus = job.gpus * job.nodes
        if lab is not None and (usage.lab_gpus[job.lab] + gpus > lab.max_gpus
                                or usage.lab_jobs[job.lab] + 1 > lab.max_jobs):
            return Reason(Code.LAB_LIMIT, lab.why(usage.lab_gpus[job.lab], usage.lab_jobs[job.lab], job))
        if user is not None and (usage.user_gpus[job.user] + gpus > user.max_gpus
                                 or usage.user_jobs[job.user] + 1 > user.max_jobs):
            return Reason(Code.USER_LIMIT, user.why(usage.user_gpus[job.user], usage.user_jobs[job.user], job))
        return None


@dataclass(frozen=True, slots=True)
class _Rules:
    """A lab's or user's limits, and the reason its used-up budget gives (None while there is budget left)."""

    kind: str
    name: str
    limits: Limits
    budget: Reason | None
    #: the limits, infinite where None: `refuse` is over a limit exactly when `_limit_reason` says so.
    max_gpus: float
    max_jobs: float

    @classmethod
    def of(cls, kind: str, name: str, limits: Limits, used: float, month: str) -> _Rules:
        why = _budget_reason(kind, name, limits, used, month)
        return cls(kind, name, limits, None if why is None else Reason(Code.BUDGET, why),
                   INF if limits.max_gpus is None else limits.max_gpus,
                   INF if limits.max_running_jobs is None else limits.max_running_jobs)

    def why(self, gpus: int, jobs: int, job: Job) -> str:
        why = _limit_reason(self.kind, self.name, self.limits, gpus, jobs, job)
        assert why is not None
        return why


def would_borrow(job: Job, usage: Usage, labs: Mapping[str, Lab]) -> bool:
    """True when starting `job` would take its lab beyond its guarantee."""
    lab = labs.get(job.lab)
    if lab is None or lab.guaranteed_gpus is None:
        return False
    return usage.lab_gpus.get(job.lab, 0) + job.gpus * job.nodes > lab.guaranteed_gpus


def victim_key(run: Running) -> tuple[float, ...]:
    """Cheapest victims first. Only borrowing, preemptible jobs of other labs are candidates at all; among them:

    1. lower job priority first;
    2. least work lost first: the most recent of start and last checkpoint latest;
    3. fewest GPUs lost first;
    4. highest job id first (the youngest), so the choice is deterministic.
    """
    saved = max(run.start_time, run.last_checkpoint or run.start_time)
    return (run.job.priority, -saved, run.gpus, -run.job.id)


def impossible(
    job: Job,
    nodes: tuple[Node, ...],
    labs: Mapping[str, Lab],
    lend: bool,
    users: Mapping[str, User] | None = None,
) -> Reason | None:
    """Why no cluster state could ever run `job` (so it should be refused at submit), or None.

    Counts every node that is not down; a job that only down nodes could run is not impossible (the node may
    come back) and gets `NODE_DOWN` in the cycle instead. A job larger than its lab's or its user's max_gpus
    could never start either."""
    if job.gpus < 0 or job.nodes < 1:
        return Reason(Code.IMPOSSIBLE, "needs at least one node and zero or more GPUs")
    for kind, name, owner in (("lab", job.lab, labs.get(job.lab)), ("user", job.user, (users or {}).get(job.user))):
        cap = owner.limits.max_gpus if owner is not None else None
        if cap is not None and job.total_gpus > cap:
            return Reason(Code.IMPOSSIBLE, f"needs {job.total_gpus} GPUs; {kind} {name} has max_gpus {cap}")

    def allowed(n: Node) -> bool:
        return lend or n.owner is None or n.owner == job.lab

    # Most jobs fit the first nodes looked at: look at only as many as it takes (1,000 nodes cost 0.4 ms).
    fits = (n for n in nodes if allowed(n) and takes_model(job, n.gpu_model) and _could_ever_fit(n, job))
    if sum(1 for _ in islice(fits, min(job.nodes, len(nodes)))) >= job.nodes:  # any count: the core's callers vary
        return None
    may_use = [n for n in nodes if allowed(n)]
    usable = [n for n in may_use if takes_model(job, n.gpu_model)]
    models = sorted({n.gpu_model for n in may_use if n.gpus})
    if (job.gpu_model or job.gpu_models) and not any(takes_model(job, m) for m in models):
        have = ", ".join(models) or "no GPUs"
        return Reason(Code.IMPOSSIBLE, f"needs GPU model {_wanted_models(job)}; the cluster has {have}")
    fitting = sum(1 for n in usable if _could_ever_fit(n, job))
    return Reason(Code.IMPOSSIBLE, _never_fits_message(job, usable, fitting))


def _could_ever_fit(node: Node, job: Job) -> bool:
    return (
        len(node.gpus) >= job.gpus
        and (not node.cpus or job.cpus <= node.cpus)
        and (not node.memory_mb or job.memory_mb <= node.memory_mb)
        and serves(node, job)
    )


def _never_fits_message(job: Job, usable: list[Node], fitting: int) -> str:
    if job.nodes > 1:
        exist = "1 such node exists" if fitting == 1 else f"{fitting} such nodes exist"
        return f"needs {job.nodes} nodes with {gpus(job.gpus)} each; only {exist}"
    if not usable:
        return "no node this job may use exists"
    biggest = max(usable, key=lambda n: len(n.gpus))
    if len(biggest.gpus) < job.gpus:
        return f"needs {job.gpus} GPUs on one node; the largest node has {len(biggest.gpus)} ({biggest.name})"
    most_cpus = max((n.cpus for n in usable), default=0)
    if most_cpus and job.cpus > most_cpus:
        return f"needs {job.cpus} CPUs on one node; the largest node has {most_cpus}"
    most_mem = max((n.memory_mb for n in usable), default=0)
    if most_mem and job.memory_mb > most_mem:
        return f"needs {job.memory_mb} MiB of memory on one node; the largest node has {most_mem} MiB"
    missing = sorted(label for label in job.labels if not any(label in n.labels for n in usable))
    said = dict(job.label_reasons)
    if missing and all(label in said for label in missing):
        return "; ".join(said[label] for label in missing)
    if missing:
        return f"needs node label {', '.join(missing)}; no node{_of_model(job)} has it"
    if job.gpu_memory_mb and not any(serves(n, job) for n in usable if job.labels <= n.labels):
        most = max((min(g.memory_mb for g in n.gpus) for n in usable if n.gpus), default=0)
        return (f"needs GPUs with at least {job.gpu_memory_mb} MiB each{_of_model(job)}; "
                f"the most any node's GPUs have is {most} MiB")
    return f"needs node labels {', '.join(sorted(job.labels))}; no node{_of_model(job)} has them all"


def _wanted_models(job: Job) -> str:
    return job.gpu_model or " or ".join(sorted(job.gpu_models))


def _of_model(job: Job) -> str:
    return f" with GPU model {_wanted_models(job)}" if job.gpu_model or job.gpu_models else ""
