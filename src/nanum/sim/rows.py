"""What every trace importer reads with: its options, and a raw CSV file's rows and GPU counts checked one by one
(a bad value skips its row with a reason; a file without the columns a format needs is refused)."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nanum.sim.traces import ImportReport, TraceError, count, open_text


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportOptions:
    """Options some formats need: `lab` for single-lab traces, `nodes`/`throughputs`/`worker` for some formats."""

    lab: str = ""
    nodes: Path | None = None
    throughputs: Path | None = None
    worker: str = "v100"


def dict_rows(path: Path, required: tuple[str, ...], fmt: str) -> Iterator[tuple[int, dict[str, str]]]:
    with open_text(path) as f:
        reader = csv.DictReader(f)
        have = set(reader.fieldnames or ())
        missing = [c for c in required if c not in have]
        if missing:
            raise TraceError(
                f"{path} is not a {fmt} file: it lacks column(s) {', '.join(missing)} "
                f"(it has {', '.join(sorted(have)) or 'none'})"
            )
        for line, row in enumerate(reader, start=2):
            yield line, {k: (v or "").strip() for k, v in row.items() if k is not None}


def rows(
    path: Path, required: tuple[str, ...], fmt: str, report: ImportReport
) -> Iterator[tuple[int, dict[str, str]]]:
    for line, row in dict_rows(path, required, fmt):
        report.rows += 1
        yield line, row


def gpu_count(text: str, report: ImportReport, line: int) -> int | None:
    """A GPU count; None (row skipped with a reason) for 0 or junk."""
    try:
        gpus = count(text, "num_gpus", minimum=0)
    except ValueError as e:
        report.skip(line, str(e))
        return None
    if gpus == 0:
        report.skip(line, "requests no GPU (CPU-only job)")
        return None
    return gpus
