"""The request and response bodies of environments, datasets and checkpoint listings (docs/environments.md)."""

from __future__ import annotations

import posixpath
from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from nanum.server.inputs import ApiIn
from nanum.server.limits import MAX_PATH

Name = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
#: An image reference as podman and docker take it (`registry/name:tag`, `name@sha256:...`); never an option.
Image = Annotated[str, Field(min_length=1, max_length=512, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")]
MAX_SETUP = 4096


def node_path(value: str, what: str, example: str) -> str:
    """An absolute, normalised path that a bind mount can name (no `:` or `,`, no control characters)."""
    if not value.startswith("/"):
        raise ValueError(f"the {what} must be an absolute path on the nodes, such as {example}")
    if any(c in value for c in ":,") or any(ord(c) < 32 for c in value):
        raise ValueError(f"the {what} must not contain ':', ',' or control characters")
    return posixpath.normpath(value)


class EnvironmentIn(ApiIn):
    """A container `image` (run by `runtime`, or whichever the node has) or a Python environment `python`
    (a venv or conda prefix), and/or a `setup` line run in the job's shell before its command."""

    name: Name
    image: Image | None = None
    runtime: Literal["podman", "docker"] | None = None
    python: str | None = Field(default=None, max_length=MAX_PATH)
    setup: str | None = Field(default=None, max_length=MAX_SETUP)
    description: str = Field(default="", max_length=1000)
    lab: str | None = Field(default=None, max_length=64, description="the lab that may use it; none: everyone")

    @field_validator("python")
    @classmethod
    def _python(cls, v: str | None) -> str | None:
        return None if v is None else node_path(v, "python environment", "/opt/envs/torch")

    @field_validator("setup")
    @classmethod
    def _setup(cls, v: str | None) -> str | None:
        if v is not None and ("\0" in v or not v.strip()):
            raise ValueError("the setup line must not be empty or contain a null byte")
        return v

    @model_validator(mode="after")
    def _one_kind(self) -> EnvironmentIn:
        if self.image and self.python:
            raise ValueError("an environment is a container image or a Python environment, not both")
        if not (self.image or self.python or self.setup):
            raise ValueError("give an image, a python environment path or a setup line")
        if self.runtime and not self.image:
            raise ValueError("a runtime is only for a container image; give --image too")
        return self


class EnvironmentOut(BaseModel):
    name: str
    owner: str
    lab: str | None = Field(description="the lab that may use it; None: everyone")
    image: str | None
    runtime: str | None
    python: str | None
    setup: str | None
    description: str
    uses: int = Field(description="jobs submitted with it")
    created: str | None


class DatasetIn(ApiIn):
    name: Name
    path: str = Field(min_length=1, max_length=MAX_PATH)
    description: str = Field(default="", max_length=1000)
    lab: str | None = Field(default=None, max_length=64, description="the lab that may use it; none: everyone")

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        return node_path(v, "dataset path", "/data/imagenet")


class DatasetOut(BaseModel):
    name: str
    path: str
    owner: str
    lab: str | None
    description: str
    uses: int
    created: str | None
    variable: str = Field(description="the environment variable that holds its path inside a job")


class CheckpointFile(BaseModel):
    path: str = Field(description="relative to the job's checkpoint directory")
    size: int
    modified: str | None


class CheckpointsOut(BaseModel):
    job_id: int
    directory: str
    exists: bool
    files: list[CheckpointFile]
