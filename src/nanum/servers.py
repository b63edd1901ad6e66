"""Several servers in one setting: `--server`, `NANUM_SERVER` and the saved login may name servers that share one
PostgreSQL database as `URL1,URL2`; clients and agents use the first that answers."""

from __future__ import annotations


def server_urls(server: str) -> tuple[str, ...]:
    """Every server URL in `server`, in order, without surrounding spaces or trailing slashes."""
    return tuple(url.strip().rstrip("/") for url in server.split(",") if url.strip())
