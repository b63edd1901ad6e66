"""Usage decay and fair-share factors, shared by the `fairshare`, `priority` and `gittins` orders and `nanum priority`.

Usage is GPU-seconds with exponential decay: usage seen `half_life` seconds ago counts half. A lab's fair-share
factor is Slurm's classic 2^(-U/S): U its share of all decayed usage, S its share of all weights. A lab that used
exactly its share gets 0.5, an idle lab 1.0, a lab at twice its share 0.25.
"""

from __future__ import annotations

from collections.abc import Mapping

from nanum.core.model import Lab, User

DEFAULT_HALF_LIFE = 7 * 24 * 3600.0


def decay(usage: float, elapsed: float, half_life: float = DEFAULT_HALF_LIFE) -> float:
    """`usage` as it counts `elapsed` seconds later."""
    if elapsed <= 0 or half_life <= 0:
        return usage
    return float(usage * 0.5 ** (elapsed / half_life))


def lab_factor(lab: str, labs: Mapping[str, Lab], totals: tuple[float, float] | None = None) -> float:
    """Fair-share factor in (0, 1]: 1 for a lab that used nothing, 0.5 for one exactly at its share. `totals` is
    `lab_totals(labs)` when the caller already has it (a cycle asks for every lab)."""
    total_usage, total_weight = lab_totals(labs) if totals is None else totals
    info = labs.get(lab)
    if info is None or total_usage <= 0 or total_weight <= 0:
        return 1.0
    share = info.weight / total_weight
    used = info.decayed_usage / total_usage
    return float(2.0 ** (-used / share)) if share > 0 else 0.0


def lab_totals(labs: Mapping[str, Lab]) -> tuple[float, float]:
    """All labs' decayed usage and all their weights."""
    return sum(x.decayed_usage for x in labs.values()), sum(x.weight for x in labs.values())


def user_factor(user: str, users: Mapping[str, User]) -> float:
    """The same factor between users, each with an equal share."""
    total_usage = sum(x.decayed_usage for x in users.values())
    info = users.get(user)
    if info is None or total_usage <= 0 or not users:
        return 1.0
    return float(2.0 ** (-(info.decayed_usage / total_usage) * len(users)))
