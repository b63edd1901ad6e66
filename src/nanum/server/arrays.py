"""Job array specifications: `0-99%8` (tasks 0 to 99, at most 8 running at once), `1,3,5-9`, `0-20:2` (a step).

Pure text to numbers, shared by the API's validation and the submit service; errors are `ValueError`s whose text
says what is wrong and what works.
"""

from __future__ import annotations

from nanum.server.limits import MAX_ARRAY_INDEX, MAX_ARRAY_TASKS

EXAMPLE = "give e.g. 0-99, 0-99%8, 1,3,5-9 or 0-20:2"


def parse_array(text: str) -> tuple[list[int], int | None]:
    """'0-9%2' -> ([0, 1, ..., 9], 2); '1,3,5-7' -> ([1, 3, 5, 6, 7], None); '0-6:3' -> ([0, 3, 6], None)."""
    spec, _, limit_text = text.partition("%")
    limit = None
    if limit_text:
        if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_ARRAY_TASKS:
            raise ValueError(f"array {text!r}: the running limit after % must be a whole number from 1 to "
                             f"{MAX_ARRAY_TASKS:,}")
        limit = int(limit_text)
    tasks: set[int] = set()
    for part in spec.split(","):
        indices = _range(part, text)
        if len(indices) > MAX_ARRAY_TASKS or len(tasks.union(indices)) > MAX_ARRAY_TASKS:
            raise ValueError(f"array {text!r} has more than {MAX_ARRAY_TASKS:,} tasks; split it into several arrays")
        tasks.update(indices)
    return sorted(tasks), limit


def _range(part: str, text: str) -> range:
    bounds, _, step_text = part.partition(":")
    first, dash, last = bounds.partition("-")
    numbers = [first, last] if dash else [first]
    if not all(n.isdigit() for n in numbers) or (step_text and not step_text.isdigit()):
        raise ValueError(f"cannot read array {text!r}; {EXAMPLE}")
    lo, hi, step = int(first), int(last) if dash else int(first), int(step_text or 1)
    if step < 1 or hi < lo:
        raise ValueError(f"array {text!r}: {part!r} is an empty range; {EXAMPLE}")
    if hi > MAX_ARRAY_INDEX:
        raise ValueError(f"array {text!r}: task indices go up to {MAX_ARRAY_INDEX:,}")
    return range(lo, hi + 1, step)
