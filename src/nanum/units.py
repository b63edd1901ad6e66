"""Sizes, durations and node labels as people write them, for every front end (the CLI's flags and `#NANUM` lines,
the dashboard's submit form): `parse_mem` reads 512M, 32G, 1.5T (a bare number is MiB) into MiB; `parse_time`
reads the forms sbatch knows (90 = 90 minutes, 30:00, 1:30:00, 2-00:00:00, 2-12) or a unit suffix (90s, 30m, 4h,
2d) into seconds; `parse_label` checks a node label (net=ib). A value they cannot read raises `ValueError` with
one sentence naming `what`, the value (cut short where it is long: `quoted`) and an example that works.
`whole_number` and `decimal_number` read a number only as it is written plainly (not `1_6`, `１６` or `nan`, which
Python's `int` and `float` read), for the command line and the API alike. No I/O, and nothing from the CLI or the
server but the label pattern jobs are checked with (`nanum.jobfields`)."""

from __future__ import annotations

import math
import re

from nanum.jobfields import LABEL_PATTERN

__all__ = ["all_digits", "decimal_number", "parse_label", "parse_mem", "parse_time", "quoted", "whole_number"]

_LABEL = re.compile(LABEL_PATTERN)

_MEM = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_MEM_FACTOR = {"k": 1 / 1024, "": 1, "m": 1, "g": 1024, "t": 1024 * 1024}
_UNIT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(s|sec|m|min|h|hr|d|day|days)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400, "day": 86400,
                 "days": 86400}
_DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def all_digits(text: str) -> bool:
    """Whether `text` is a whole number as ids are written: ASCII digits only (`str.isdigit` alone takes '²', which
    `int` refuses; `int` alone takes '1_2' as 12)."""
    return text.isascii() and text.isdigit()


def whole_number(text: str) -> int | None:
    """`text` as a whole number written the plain way (ASCII digits, with a '-' for a negative one), else None.
    Python's `int` also reads '1_6' as 16, and '１６' and ' 16' as 16: `--gpus 1_6` asked for 16 GPUs. A number of
    more digits than Python converts (4,300) is read as ±10^4000, past every bound: `int` would raise instead."""
    digits = text.removeprefix("-")
    if not all_digits(digits):
        return None
    if len(digits) > _MOST_DIGITS:
        return -_HUGE if text.startswith("-") else _HUGE
    return int(text)


_MOST_DIGITS = 4000
_HUGE: int = 10**_MOST_DIGITS


def decimal_number(text: str) -> float | None:
    """`text` as a finite number written the plain way ('2', '0.5', '-1.5', '1e3'), else None: not '1_0.5',
    'nan', 'inf', '1e999' (infinity) or '１.５', all of which Python's `float` reads."""
    if not _DECIMAL.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def parse_mem(text: str, what: str) -> int:
    """'32G' -> 32768 (MiB). A bare number is MiB."""
    match = _MEM.match(text)
    if not match:
        raise ValueError(f"{what}: cannot read {text!r}; give a size such as 512M, 32G or 1T")
    mib = float(match.group(1)) * _MEM_FACTOR[match.group(2).lower()]
    if not math.isfinite(mib):  # more digits than a float holds
        raise ValueError(f"{what}: {text[:40]!r}... is not a size a machine has; give e.g. 512M or 32G")
    if mib <= 0:
        raise ValueError(f"{what}: {text!r} is not a positive size; give e.g. 512M or 32G")
    return max(1, round(mib))


def memory_text(memory_mb: int) -> str:
    """`2048` → `2 GiB`, `1536` → `1.5 GiB`, `512` → `512 MiB`."""
    if memory_mb < 1024:
        return f"{memory_mb} MiB"
    return f"{memory_mb / 1024:.1f}".removesuffix(".0") + " GiB"


def parse_time(text: str, what: str) -> int:
    """'4h' -> 14400, '1:30:00' -> 5400, '2-00:00:00' -> 172800, '90' -> 5400 (minutes, as in sbatch)."""
    if sum(c.isdigit() for c in text) > 30:  # past any duration, and past what int() and float() convert
        raise ValueError(f"{what}: {text[:40]!r}... is longer than any time limit; give e.g. 30m, 4h or 2d")
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
