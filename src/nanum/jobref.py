"""How users name a job: `12_7` for task 7 of array 12, else its id. `nanum ps --expand` lists tasks so, `nanum
cancel 12_7` takes them so, and the scheduler's reasons, the dashboard and the notices say them so
(`nanum.core.model.Job.ref` is the same rule in the core, which imports nothing outside itself).

A module of its own, importing nothing, so that `nanum ps` and `nanum show` name jobs by it at no cost.
"""

from __future__ import annotations

from typing import Any


def job_ref(job: Any) -> str:
    """A job as the API shows it (a mapping with `id`, `array_id`, `array_task`), as users name it."""
    return ref_of(job["id"], job.get("array_id"), job.get("array_task"))


def ref_of(job_id: int, array_id: int | None, array_task: int | None) -> str:
    """`job_ref` from a job's id and its array's id and task (as the store has them)."""
    return str(job_id) if array_id is None else f"{array_id}_{array_task}"
