"""Routes for environments, datasets and a job's checkpoint files (nanum.server.services.environments,
nanum.server.services.checkpoints)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from nanum.server.auth import CallerDep, Context
from nanum.server.environment_schemas import CheckpointsOut, DatasetIn, DatasetOut, EnvironmentIn, EnvironmentOut
from nanum.server.inputs import JobIdPath, KnownQuery
from nanum.server.services import checkpoints, environments

router = APIRouter(tags=["environments"], route_class=KnownQuery)


@router.post("/environments", status_code=201)
def add_environment(body: EnvironmentIn, ctx: Context, caller: CallerDep) -> EnvironmentOut:
    """Add an environment for a lab of the caller's (default: their default lab), or for everyone (admins)."""
    return environments.add_environment(ctx, caller, body)


@router.get("/environments")
def list_environments(ctx: Context, caller: CallerDep) -> list[EnvironmentOut]:
    """The environments the caller may use: everyone's and their labs' (admins: all)."""
    return environments.list_environments(ctx, caller)


@router.get("/environments/{name}")
def get_environment(name: str, ctx: Context, caller: CallerDep) -> EnvironmentOut:
    return environments.get_environment(ctx, caller, name)


@router.delete("/environments/{name}", status_code=204)
def remove_environment(name: str, ctx: Context, caller: CallerDep) -> Response:
    """Remove an environment (its owner, a manager of its lab, an admin); queued jobs keep what it was."""
    environments.remove_environment(ctx, caller, name)
    return Response(status_code=204)


@router.post("/datasets", status_code=201)
def add_dataset(body: DatasetIn, ctx: Context, caller: CallerDep) -> DatasetOut:
    """Name a read-only path on the nodes (admins; a lab's managers for their lab)."""
    return environments.add_dataset(ctx, caller, body)


@router.get("/datasets")
def list_datasets(ctx: Context, caller: CallerDep) -> list[DatasetOut]:
    return environments.list_datasets(ctx, caller)


@router.delete("/datasets/{name}", status_code=204)
def remove_dataset(name: str, ctx: Context, caller: CallerDep) -> Response:
    environments.remove_dataset(ctx, caller, name)
    return Response(status_code=204)


@router.get("/jobs/{job_id}/checkpoints")
def job_checkpoints(job_id: JobIdPath, ctx: Context, caller: CallerDep) -> CheckpointsOut:
    """The files in the job's checkpoint directory, with sizes and times (its owner, lab managers, admins)."""
    return checkpoints.list_files(ctx, caller, job_id)
