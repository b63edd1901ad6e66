"""The request and response bodies of jobs in the v1 API (docs/api.md), built from their declarations in
`nanum.jobfields`: a submission (`JobSubmit`), a change to a waiting job (`JobPatch`), and a job as every
listing shows it (`JobOut`), with the states a job goes through.

The fields are declared once, as the SDK types them (`nanum.jobfields`), and `nanum.server.fieldmodels` makes
the models of them; this module adds what a field's bounds cannot say (a command whose program is named, an
array that parses). mypy reads a submission through `JobSubmit.request`, typed as the declaration; pydantic and
OpenAPI read the models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from pydantic import BaseModel, field_validator

from nanum.jobfields import Allocation, Job, JobChanges, JobRequest, Segment
from nanum.server import fieldmodels
from nanum.server.arrays import parse_array
from nanum.server.inputs import ApiIn
from nanum.server.limits import MAX_COMMAND_BYTES, MAX_ENV_BYTES

__all__ = ["ACTIVE_STATES", "FINISHED_STATES", "JOB_STATES", "AllocationOut", "JobOut", "JobPatch", "JobSubmit",
           "SegmentOut", "SubmitChecks"]

JOB_STATES = ("pending", "running", "completed", "failed", "cancelled", "timeout", "lost", "held")
ACTIVE_STATES = ("pending", "running", "held")
FINISHED_STATES = ("completed", "failed", "cancelled", "timeout")


def _size(texts: list[str]) -> int:
    return sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)


class SubmitChecks(ApiIn):
    """What a submission must satisfy beyond each field's own bounds, and its fields as the typed dict they are
    declared as (`request`). The fields are `nanum.jobfields.JobRequest`'s, which `JobSubmit` adds."""

    @property
    def request(self) -> JobRequest:
        """The submission's fields, every one of them (defaults filled in)."""
        return cast("JobRequest", dict(self))

    @field_validator("array", check_fields=False)
    @classmethod
    def _array(cls, v: str | None) -> str | None:
        if v is not None:
            parse_array(v)  # raises ValueError with the reason
        return v

    def dependencies(self) -> list[list[str]]:
        """`[[kind, target], ...]` as stored (nanum.server.services.eligibility)."""
        request = self.request
        pairs = (("started", request["after"]), ("ok", request["after_ok"]), ("failed", request["after_failed"]),
                 ("any", request["after_any"]))
        return [[kind, target] for kind, targets in pairs for target in targets]

    @field_validator("command", check_fields=False)
    @classmethod
    def _program_named(cls, v: list[str]) -> list[str]:
        if not v[0].strip():
            raise ValueError("the program name must not be empty")
        if (size := _size(v)) > MAX_COMMAND_BYTES:
            raise ValueError(f"the command is {size} bytes; at most {MAX_COMMAND_BYTES} are accepted")
        return v

    @field_validator("env", check_fields=False)
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not key or "=" in key:
                raise ValueError(f"{key!r} is not a valid environment variable name")
        if (size := _size([*v, *v.values()])) > MAX_ENV_BYTES:
            raise ValueError(f"the environment is {size} bytes; at most {MAX_ENV_BYTES} are accepted")
        return v


class PatchChecks(ApiIn):
    """A change to a waiting job (`nanum modify`), and its fields as the typed dict they are declared as
    (`changes`): `nanum.jobfields.JobChanges`, each bounded as a submission's, which `JobPatch` adds."""

    @property
    def changes(self) -> JobChanges:
        """The fields given, and only those."""
        return cast("JobChanges", self.model_dump(exclude_unset=True))


if TYPE_CHECKING:  # mypy reads the fields from the TypedDicts they are declared as; pydantic, from these models
    JobSubmit = SubmitChecks
    JobPatch = PatchChecks
    AllocationOut = BaseModel
    SegmentOut = BaseModel
    JobOut = BaseModel
else:
    JobSubmit = fieldmodels.model("JobSubmit", JobRequest, SubmitChecks)
    JobPatch = fieldmodels.changes_model(
        "JobPatch", JobChanges, JobRequest, PatchChecks, more={"name": {"min_length": 1}},
        doc="`nanum modify`: what may change while a job waits. Only the fields present change; `null` makes "
            "`gpu_model`, `gpu_memory_mb` and `memory_mb` any model, any memory and no limit "
            "(`nanum.jobfields.CLEARED_BY_NULL`), and `constraints: []` drops every label asked for.")
    AllocationOut = fieldmodels.model("AllocationOut", Allocation, BaseModel)
    SegmentOut = fieldmodels.model("SegmentOut", Segment, BaseModel, doc=Segment.__doc__)
    JobOut = fieldmodels.model("JobOut", Job, BaseModel, models={Allocation: AllocationOut, Segment: SegmentOut})
