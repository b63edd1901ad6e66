"""What a job's environment and datasets ask of a node, as node labels the core matches (`Job.labels`).

A node's agent reports the container runtimes it found and which of the server's paths (Python environments,
datasets) exist on it (`NodeInfo.runtimes`, `NodeInfo.paths`); each becomes a label here, so placement keeps
jobs off nodes that lack them, and a job no node can serve waits with a reason in words (`Job.label_reasons`):
"no node has podman for environment torch-2.4". The labels start with `nanum:`, which node labels set by
people cannot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ANY_RUNTIME", "job_labels", "node_labels"]

#: Any container runtime (an image whose environment names none runs on podman or docker).
ANY_RUNTIME = "nanum:container"


def runtime_label(runtime: str) -> str:
    return f"nanum:runtime={runtime}"


def path_label(path: str) -> str:
    return f"nanum:path={path}"


def node_labels(inventory: Mapping[str, Any]) -> frozenset[str]:
    """The labels a node's reported runtimes and paths give it."""
    runtimes = [str(r) for r in inventory.get("runtimes", ())]
    labels = {runtime_label(r) for r in runtimes} | {path_label(str(p)) for p in inventory.get("paths", ())}
    if runtimes:
        labels.add(ANY_RUNTIME)
    return frozenset(labels)


def job_labels(
    environment: str | None, spec: Mapping[str, Any] | None, datasets: Mapping[str, str] | None
) -> tuple[frozenset[str], tuple[tuple[str, str], ...]]:
    """The labels a job needs on every node it runs on, and what to say when no node has one."""
    needs: dict[str, str] = {}
    spec = spec or {}
    if spec.get("image"):
        runtime = spec.get("runtime")
        label = runtime_label(runtime) if runtime else ANY_RUNTIME
        what = runtime or "a container runtime (podman or docker)"
        needs[label] = f"no node has {what} for environment {environment}"
    if spec.get("python"):
        needs[path_label(spec["python"])] = f"python environment {spec['python']} not on any node"
    for name, path in sorted((datasets or {}).items()):
        needs.setdefault(path_label(path), f"dataset {name} ({path}) not on any node")
    return frozenset(needs), tuple(sorted(needs.items()))
