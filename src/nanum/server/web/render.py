"""Rendering dashboard pages: the Jinja2 environment (autoescaped, templates shipped in the package), the
filters pages use to print times, sizes and shares, and the response helper every page goes through."""

from __future__ import annotations

import shlex
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from nanum import __version__
from nanum.jobref import job_ref
from nanum.monitor.idle import duration as _duration
from nanum.server.callers import Caller
from nanum.server.web import session

WEB = Path(__file__).parent
NAV = (("/", "Cluster"), ("/queue", "Queue"), ("/labs", "Labs"), ("/nodes", "Nodes"), ("/reports", "Reports"),
       ("/submit", "Submit"))


def _num(value: object) -> float | None:
    """A number, or None for anything else (None, or a value the page does not have)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def duration(seconds: float | None) -> str:
    value = _num(seconds)
    return "" if value is None else _duration(value)


def ago(t: float | None, now: float | None = None) -> str:
    if t is None:
        return "never"
    delta = (now if now is not None else time.time()) - t
    return "just now" if delta < 5 else f"{_duration(delta)} ago"


def clock(t: float | None) -> str:
    """Unambiguous wherever the reader is: `2026-12-01 14:02 UTC`."""
    value = _num(t)
    return "" if value is None else datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M UTC")


def clock_s(t: float | None) -> str:
    """`clock` to the second, for a job's history, where several events share a minute: `2026-12-01 14:02:07 UTC`."""
    value = _num(t)
    return "" if value is None else datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def gib(mb: float | None) -> str:
    value = _num(mb)
    if value is None:
        return "–"
    return f"{value / 1024:.0f} GiB" if value >= 10240 else f"{value / 1024:.1f} GiB"


def pct(value: float | None) -> str:
    found = _num(value)
    return "–" if found is None else f"{found:.0f}%"


def hours(value: float | None) -> str:
    found = _num(value)
    if found is None:
        return "–"
    return f"{found:,.0f}" if found >= 100 else f"{found:,.1f}"


def shell(words: list[str] | None) -> str:
    """A command as a shell line that gives back the same words: `sh -c 'echo hi; sleep 1'`."""
    return shlex.join(words or [])


ENV = Environment(
    loader=FileSystemLoader(WEB / "templates"),
    autoescape=select_autoescape(("html", "svg")),
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters.update(duration=duration, ago=ago, clock=clock, gib=gib, pct=pct, hours=hours, shell=shell, ref=job_ref)
ENV.globals.update(version=__version__, nav=NAV)


def page(request: Request, template: str, caller: Caller | None, status_code: int = 200, **values: Any) -> HTMLResponse:
    """Render `template` with the page's common values: who is logged in, the CSRF token, the current path."""
    context = {
        "caller": caller,
        "csrf": session.csrf_token(request) if caller is not None else "",
        "path": request.url.path,
        "now": time.time(),
        **values,
    }
    html = ENV.get_template(template).render(context)
    return HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)


#: Pages are same-origin only: no framing, no inline scripts, nothing from other sites.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
