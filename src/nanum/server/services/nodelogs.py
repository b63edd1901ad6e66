"""The logs of multi-node jobs: one file per node, and the job's log with every node's lines interleaved.

Each node's agent counts the bytes of its own part's output, so a multi-node job keeps one offset-checked file
per node (`logs/<job>.<node>.log`, its run headers and skew beside it, as a single-node job's `<job>.log`).
What each node sends is also appended, as it arrives, to the job's log `<job>.log`, every line led by `[node] `;
a line a node has not finished yet is ended when another node's output comes between, and a requeued job's next
run starts after a `--- run N ---` line. `nanum logs ID` reads the
interleaved log, `nanum logs ID --node N` one node's file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nanum.server.errors import BadRequest

__all__ = ["interleave", "node_of", "stem"]


def stem(job_id: int, node: str, gang: bool) -> str:
    """The name (less `.log`) of the file a node's output of the job goes to."""
    return f"{job_id}.{node}" if gang else str(job_id)


def interleave(logs: Path, job_id: int, node: str, text: str, run: int) -> None:
    """Append `text` from `node` to the job's interleaved log, each line led by `[node] `; the first output of a
    later run (the job was requeued) comes after a `--- run N ---` line."""
    if not text:
        return
    path, last_file = logs / f"{job_id}.log", logs / f"{job_id}.log.last"
    try:
        last, open_line, last_run = last_file.read_text().split("\t")
    except (FileNotFoundError, ValueError):
        last, open_line, last_run = "", "0", str(run)
    out = []
    continuing = open_line == "1" and last == node and last_run == str(run)
    if open_line == "1" and not continuing:
        out.append("\n")
    if last_run != str(run):
        out.append(f"--- run {run} ---\n")
    for i, line in enumerate(text.splitlines(keepends=True)):
        if i or not continuing:
            out.append(f"[{node}] ")
        out.append(line)
    with open(path, "ab") as f:
        f.write("".join(out).encode())
    last_file.write_text(f"{node}\t{0 if text.endswith(chr(10)) else 1}\t{run}")


def node_of(allocation: list[dict[str, Any]] | None, wanted: str) -> str:
    """The node `wanted` names among the job's: a node's name, or its rank (0 for the first)."""
    names = [str(a["node"]) for a in allocation or ()]
    if wanted in names:
        return wanted
    if wanted.isdigit() and int(wanted) < len(names):
        return names[int(wanted)]
    where = ", ".join(f"{rank} = {name}" for rank, name in enumerate(names)) or "none yet"
    raise BadRequest(f"the job has no node {wanted}; name one of its nodes or ranks ({where})")
