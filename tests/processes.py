"""Reading the process table from /proc, for tests that look for the processes a program started."""

from __future__ import annotations

from pathlib import Path


def live_children(pid: int) -> dict[int, str]:
    """The live (not zombie) child processes of `pid`, with the name each goes by (`comm`)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == pid and fields[0] not in "ZXx":
                found[int(entry.name)] = stat[stat.index("(") + 1:stat.rindex(")")]
    return found
