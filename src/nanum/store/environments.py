"""The environments schema: named environments jobs run in, and named datasets they read.

An environment is a container image (`image`, with the `runtime` it needs: podman, docker, or None for either),
a Python environment (`python`: a venv or conda prefix on the nodes), or neither, and may carry a `setup` line run
in the job's shell before its command. A dataset names a read-only `path` on the nodes. Both belong to their
`owner` and to a lab (`lab_id`), or to everyone (None); `uses` counts the jobs submitted with them.
Created by migration 0012_environments.
"""

from __future__ import annotations

from sqlalchemy import Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from nanum.store.models import Base


class EnvironmentRow(Base):
    __tablename__ = "environments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    lab_id: Mapped[int | None] = mapped_column(ForeignKey("labs.id", ondelete="CASCADE"))
    image: Mapped[str | None] = mapped_column(String(512))
    runtime: Mapped[str | None] = mapped_column(String(16))
    python: Mapped[str | None] = mapped_column(Text)
    setup: Mapped[str | None] = mapped_column(Text)
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    uses: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created: Mapped[float] = mapped_column(Float)


class DatasetRow(Base):
    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    lab_id: Mapped[int | None] = mapped_column(ForeignKey("labs.id", ondelete="CASCADE"))
    path: Mapped[str] = mapped_column(Text)
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    uses: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created: Mapped[float] = mapped_column(Float)
