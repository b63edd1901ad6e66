"""Environments and datasets: who may add, see, use and remove them, and what a job submitted with them carries.

An environment or dataset belongs to a lab (its members use it) or to everyone (`lab` None). Anyone may add an
environment for a lab of theirs; one for everyone takes an admin. Datasets are added by admins, or by a lab's
managers for their lab. The owner, a manager of its lab or an admin removes either. A job names an environment
and datasets it may use (everyone's, or its lab's); it stores them as they are at submit (`environment_spec`,
`datasets` name -> path), so later changes do not alter a queued job, and each counts one more use.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from nanum.server.callers import Caller
from nanum.server.context import ServerContext
from nanum.server.environment_schemas import DatasetIn, DatasetOut, EnvironmentIn, EnvironmentOut
from nanum.server.errors import BadRequest, Conflict, Forbidden, NotFound
from nanum.server.schemas import iso
from nanum.store import DatasetRow, EnvironmentRow, JobRow, LabRow, NodeRow, UserRow

__all__ = [
    "add_dataset", "add_environment", "check_paths", "count_uses", "dataset_variable", "for_job", "get_environment",
    "known_paths", "list_datasets", "list_environments", "remove_dataset", "remove_environment",
]


def dataset_variable(name: str) -> str:
    """`NANUM_DATASET_<NAME>`: the name upper-cased, every character but letters and digits made `_`."""
    return "NANUM_DATASET_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


# -- environments ----------------------------------------------------------------------------------------------


def add_environment(ctx: ServerContext, caller: Caller, body: EnvironmentIn) -> EnvironmentOut:
    with ctx.db.write() as s:
        lab = _scope(s, caller, body.lab, "environment")
        row = EnvironmentRow(
            name=body.name, owner_id=caller.id, lab_id=lab.id if lab else None, image=body.image,
            runtime=body.runtime, python=body.python, setup=body.setup, description=body.description, uses=0,
            created=ctx.clock(),
        )
        _insert(s, row, f"an environment named {body.name} already exists; pick another name or remove it first")
        out = _env_out(row, caller.name, lab.name if lab else None)
    if body.python:
        _ask_nodes(ctx)
    return out


def list_environments(ctx: ServerContext, caller: Caller) -> list[EnvironmentOut]:
    """Every environment the caller may use (admins: all)."""
    with ctx.db.read() as s:
        rows = s.execute(_with_names(EnvironmentRow).order_by(EnvironmentRow.name)).all()
        return [_env_out(r, owner, lab) for r, owner, lab in rows if _visible(caller, lab)]


def get_environment(ctx: ServerContext, caller: Caller, name: str) -> EnvironmentOut:
    with ctx.db.read() as s:
        found = s.execute(_with_names(EnvironmentRow).where(EnvironmentRow.name == name)).first()
        if found is None or not _visible(caller, found[2]):
            raise NotFound(f"no environment named {name}; `nanum environment list` shows those you may use")
        return _env_out(*found)


def remove_environment(ctx: ServerContext, caller: Caller, name: str) -> None:
    with ctx.db.write() as s:
        row = s.scalars(select(EnvironmentRow).where(EnvironmentRow.name == name)).first()
        if row is None:
            raise NotFound(f"no environment named {name}")
        if not caller.may_manage(row.owner_id, row.lab_id):
            raise Forbidden(f"environment {name} is not yours; only its owner, a manager of its lab or an admin may "
                            "remove it")
        s.delete(row)


def _env_out(row: EnvironmentRow, owner: str, lab: str | None) -> EnvironmentOut:
    return EnvironmentOut(
        name=row.name, owner=owner, lab=lab, image=row.image, runtime=row.runtime, python=row.python,
        setup=row.setup, description=row.description or "", uses=row.uses or 0, created=iso(row.created),
    )


# -- datasets --------------------------------------------------------------------------------------------------


def add_dataset(ctx: ServerContext, caller: Caller, body: DatasetIn) -> DatasetOut:
    with ctx.db.write() as s:
        lab = _lab(s, body.lab) if body.lab else None
        if not (caller.admin or (lab is not None and lab.name in caller.managed)):
            where = f"lab {lab.name}'s" if lab else "everyone's"
            raise Forbidden(f"only an admin{' or a manager of that lab' if lab else ''} may add {where} datasets")
        row = DatasetRow(name=body.name, owner_id=caller.id, lab_id=lab.id if lab else None, path=body.path,
                         description=body.description, uses=0, created=ctx.clock())
        _insert(s, row, f"a dataset named {body.name} already exists; pick another name or remove it first")
        out = _dataset_out(row, caller.name, lab.name if lab else None)
    _ask_nodes(ctx)
    return out


def list_datasets(ctx: ServerContext, caller: Caller) -> list[DatasetOut]:
    with ctx.db.read() as s:
        rows = s.execute(_with_names(DatasetRow).order_by(DatasetRow.name)).all()
        return [_dataset_out(r, owner, lab) for r, owner, lab in rows if _visible(caller, lab)]


def remove_dataset(ctx: ServerContext, caller: Caller, name: str) -> None:
    with ctx.db.write() as s:
        row = s.scalars(select(DatasetRow).where(DatasetRow.name == name)).first()
        if row is None:
            raise NotFound(f"no dataset named {name}")
        if not (caller.admin or (row.lab_id is not None and row.lab_id in caller.managed_ids)):
            raise Forbidden(f"only an admin{' or a manager of its lab' if row.lab_id else ''} may remove dataset "
                            f"{name}")
        s.delete(row)


def _dataset_out(row: DatasetRow, owner: str, lab: str | None) -> DatasetOut:
    return DatasetOut(name=row.name, path=row.path, owner=owner, lab=lab, description=row.description or "",
                      uses=row.uses or 0, created=iso(row.created), variable=dataset_variable(row.name))


# -- jobs ------------------------------------------------------------------------------------------------------


def for_job(
    ctx: ServerContext, caller: Caller, lab_id: int, environment: str | None, datasets: list[str]
) -> dict[str, Any]:
    """The job columns for `environment` and `datasets` (names), or BadRequest naming the one it may not use."""
    values: dict[str, Any] = {"environment": None, "environment_spec": None, "datasets": None}
    if environment is None and not datasets:
        return values
    with ctx.db.read() as s:
        if environment is not None:
            env = s.scalars(select(EnvironmentRow).where(EnvironmentRow.name == environment)).first()
            if env is None or not _usable(caller, env.lab_id, lab_id):
                raise BadRequest(f"no environment named {environment} for this job's lab; `nanum environment list` "
                                 "shows those you may use")
            spec = {"image": env.image, "runtime": env.runtime, "python": env.python, "setup": env.setup}
            values.update(environment=environment, environment_spec={k: v for k, v in spec.items() if v})
        if datasets:
            values["datasets"] = _datasets(s, caller, lab_id, datasets)
    return values


def _datasets(s: Session, caller: Caller, lab_id: int, names: list[str]) -> dict[str, str]:
    rows = {r.name: r for r in s.scalars(select(DatasetRow).where(DatasetRow.name.in_(names)))}
    for name in names:
        row = rows.get(name)
        if row is None or not _usable(caller, row.lab_id, lab_id):
            raise BadRequest(f"no dataset named {name} for this job's lab; `nanum dataset list` shows those you may "
                             "use")
    return {name: rows[name].path for name in names}


def count_uses(s: Session, values: dict[str, Any], jobs: int = 1) -> None:
    """One more use (`jobs` more, for an array) of the job's environment and each of its datasets."""
    if values.get("environment"):
        s.execute(update(EnvironmentRow).where(EnvironmentRow.name == values["environment"])
                  .values(uses=EnvironmentRow.uses + jobs))
    if values.get("datasets"):
        s.execute(update(DatasetRow).where(DatasetRow.name.in_(list(values["datasets"])))
                  .values(uses=DatasetRow.uses + jobs))


def check_paths(ctx: ServerContext, s: Session) -> list[str]:
    """Every path the agents should look for: Python environments and datasets of pending or running jobs, and of
    every registered environment and dataset. Every heartbeat asks, so the answer is kept a few seconds
    (`Caches.paths`)."""
    known = known_paths(ctx)
    if known is not None:
        return known
    paths = _check_paths(s)
    ctx.caches.paths.put(PATHS, paths)
    return paths


def known_paths(ctx: ServerContext) -> list[str] | None:
    """`check_paths`'s answer while it is kept in memory, else None."""
    return ctx.caches.paths.get(PATHS)


#: The key of `check_paths`'s answer in `Caches.paths`.
PATHS = "paths"


def _check_paths(s: Session) -> list[str]:
    paths = {p for p in s.scalars(select(EnvironmentRow.python).where(EnvironmentRow.python.is_not(None))) if p}
    paths.update(s.scalars(select(DatasetRow.path)))
    query = select(JobRow.environment_spec, JobRow.datasets).where(
        JobRow.state.in_(("pending", "running", "held")),
        (JobRow.environment_spec.is_not(None)) | (JobRow.datasets.is_not(None)),
    )
    for spec, datasets in s.execute(query):
        if spec and spec.get("python"):
            paths.add(spec["python"])
        paths.update((datasets or {}).values())
    return sorted(paths)


# -- helpers ---------------------------------------------------------------------------------------------------


def _scope(s: Session, caller: Caller, lab: str | None, what: str) -> LabRow | None:
    """The lab a new environment belongs to: the one named (the caller's, unless admin), or everyone's for an
    admin, or the caller's default lab."""
    if lab is None and not caller.admin:
        lab = caller.default_lab
        if lab is None:
            raise BadRequest(f"you belong to no lab; only an admin may add an {what} for everyone")
    if lab is None:
        return None
    row = _lab(s, lab)
    if not caller.admin and lab not in caller.labs:
        raise Forbidden(f"you are not a member of lab {lab}; add it for a lab of yours")
    return row


def _lab(s: Session, name: str) -> LabRow:
    row = s.scalars(select(LabRow).where(LabRow.name == name)).first()
    if row is None:
        raise NotFound(f"no lab named {name}")
    return row


def _insert(s: Session, row: Any, taken: str) -> None:
    try:
        with s.begin_nested():
            s.add(row)
    except IntegrityError:
        raise Conflict(taken) from None


def _ask_nodes(ctx: ServerContext) -> None:
    """Answer every node's held heartbeat now, so its agent looks for a new path at once."""
    ctx.caches.paths.clear()
    with ctx.db.read() as s:
        names = list(s.scalars(select(NodeRow.name)))
    ctx.signals.wake(names)


def _with_names(table: Any) -> Any:
    return (select(table, UserRow.name, LabRow.name)
            .join(UserRow, UserRow.id == table.owner_id)
            .outerjoin(LabRow, LabRow.id == table.lab_id))


def _visible(caller: Caller, lab: str | None) -> bool:
    return lab is None or caller.admin or lab in caller.labs


def _usable(caller: Caller, owned_by: int | None, job_lab: int) -> bool:
    return owned_by is None or owned_by == job_lab
