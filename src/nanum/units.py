"""Sizes, durations and node labels as people write them, for every front end (the CLI's flags and `#NANUM` lines,
the dashboard's submit form): `parse_mem` reads 512M, 32G, 1.5T (a bare number is MiB) into MiB; `parse_time`
reads the forms sbatch knows (90 = 90 minutes, 30:00, 1:30:00, 2-00:00:00, 2-12) or a unit suffix (90s, 30m, 4h,
2d) into seconds; `parse_label` checks a node label (net=ib). A value they cannot read raises `ValueError` with
one sentence naming `what`, the value (cut short where it is long: `quoted`) and an example that works. No I/O,
and nothing from the CLI or the server but the label pattern jobs are checked with (`nanum.jobfields`)."""

from __future__ import annotations

import re

from nanum.jobfields import LABEL_PATTERN

__all__ = ["parse_label", "parse_mem", "parse_time", "quoted"]

_LABEL = re.compile(LABEL_PATTERN)

_MEM = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_MEM_FACTOR = {"k": 1 / 1024, "": 1, "m": 1, "g": 1024, "t": 1024 * 1024}
_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|hr|d|day|days)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400, "day": 86400,
                 "days": 86400}


def parse_mem(text: str, what: str) -> int:
    """'32G' -> 32768 (MiB). A bare number is MiB."""
    match = _MEM.match(text)
    if not match:
        raise ValueError(f"{what}: cannot read {text!r}; give a size such as 512M, 32G or 1T")
    mib = float(match.group(1)) * _MEM_FACTOR[match.group(2).lower()]
    if mib <= 0:
        raise ValueError(f"{what}: {text!r} is not a positive size; give e.g. 512M or 32G")
    return max(1, round(mib))


def parse_time(text: str, what: str) -> int:
    """'4h' -> 14400, '1:30:00' -> 5400, '2-00:00:00' -> 172800, '90' -> 5400 (minutes, as in sbatch)."""
    seconds = _parse_duration(text.strip())
    if seconds is None:
        raise ValueError(
            f"{what}: cannot read {text!r}; give e.g. 90s, 30m, 4h, 2d, 1:30:00 or 2-00:00:00 "
            "(a bare number is minutes)"
        )
    if seconds <= 0:
        raise ValueError(f"{what}: {text!r} is not a positive duration; give e.g. 30m or 4h")
    return seconds


def _parse_duration(text: str) -> int | None:
    if match := _UNIT.match(text):
        return round(float(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()])
    days = 0
    if "-" in text:
        head, _, text = text.partition("-")
        if not head.isdigit() or not text:
            return None
        days = int(head)
        parts = text.split(":")  # days-hours[:minutes[:seconds]]
        if not all(p.isdigit() for p in parts) or len(parts) > 3:
            return None
        h, m, s = ([int(p) for p in parts] + [0, 0])[:3]
    else:
        parts = text.split(":")  # minutes | minutes:seconds | hours:minutes:seconds
        if not all(p.isdigit() for p in parts) or len(parts) > 3:
            return None
        nums = [int(p) for p in parts]
        h, m, s = (0, nums[0], 0) if len(nums) == 1 else (0, nums[0], nums[1]) if len(nums) == 2 else nums
    return days * 86400 + h * 3600 + m * 60 + s


def parse_label(text: str, what: str) -> str:
    """'net=ib' -> 'net=ib': a node label, as a job asks for it or a node is given it."""
    key, _, value = text.strip().partition("=")
    if len(key) > 63 or len(value) > 63:
        raise ValueError(f"{what}: {quoted(text)} is too long; a label's key and its value have at most 63 "
                         "characters each")
    if not _LABEL.match(text.strip()):
        raise ValueError(f"{what}: cannot read {quoted(text)}; give a node label KEY=VALUE, e.g. net=ib (letters, "
                         "digits and _ . / -)")
    return text.strip()


def quoted(text: str, most: int = 40) -> str:
    """`text` as an error message shows it: quoted, and cut short where it is long."""
    return repr(text) if len(text) <= most else f"{text[:most]!r}... ({len(text)} characters)"
