"""Webhook targets: only public addresses, unless an admin allowed the host (`--webhook-allow-host`).

A webhook makes the server send a POST wherever its URL points, so a user's URL could otherwise reach what only
the server can: itself, the database, a cloud's metadata service. A URL is checked when it is set (422) and again
at each delivery, when the host is resolved afresh (DNS can change): loopback, private, link-local, multicast,
reserved and unspecified addresses are refused. A delivery connects to the very address it checked and does not
follow redirects.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from collections.abc import Collection
from dataclasses import dataclass
from urllib.parse import urlsplit

from nanum.server.errors import Invalid

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(Exception):
    """A webhook target the server will not send to; the message says why and how an admin can allow it."""


@dataclass(frozen=True, slots=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str


def check_url(url: str, allowed: Collection[str]) -> None:
    """Raise Invalid (422) unless `url` is http(s) to a public host or to one of the `allowed` hosts. A host
    name that does not resolve now is accepted: it is checked again at each delivery."""
    try:
        target = parse(url)
        if target.host not in allowed:
            addresses = _literal(target.host) or _resolve(target.host, target.port, strict=False)
            for address in addresses:
                _refuse_private(target.host, address)
    except Refused as exc:
        raise Invalid(str(exc)) from None


def parse(url: str) -> Target:
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError:  # e.g. an unclosed [ of an IPv6 address
        raise Refused(f"webhook URL {url!r} is not a well-formed URL") from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise Refused(f"webhook URL {url!r} is not an http:// or https:// URL with a host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise Refused(f"webhook URL {url!r} has an invalid port") from None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, hostname.lower().rstrip("."), port, path)


def post(url: str, body: bytes, allowed: Collection[str], timeout: float) -> int:
    """POST `body` (JSON) to `url` after checking the address it resolves to now; returns the HTTP status.
    Raises Refused for a forbidden address, OSError when the delivery fails."""
    target = parse(url)
    addresses = _literal(target.host) or _resolve(target.host, target.port, strict=True)
    if target.host not in allowed:
        for address in addresses:
            _refuse_private(target.host, address)
    conn = _connection(target, str(addresses[0]), timeout)
    try:
        conn.request("POST", target.path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def _literal(host: str) -> list[Address]:
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        return []


def _resolve(host: str, port: int, *, strict: bool) -> list[Address]:
    if host == "localhost" or host.endswith(".localhost"):
        return [ipaddress.ip_address("127.0.0.1")]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        if strict:
            raise OSError(f"cannot resolve {host}: {exc}") from exc
        return []
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def _refuse_private(host: str, address: Address) -> None:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    kind = _kind(address)
    if kind is not None:
        shown = host if host == str(address) else f"{host} ({address})"
        raise Refused(
            f"webhook host {shown} is {kind} address; an admin can allow it with "
            f"`nanum up --webhook-allow-host {host}`"
        )


def _kind(address: Address) -> str | None:
    if address.is_loopback:
        return "a loopback"
    if address.is_link_local:
        return "a link-local"
    if address.is_multicast:
        return "a multicast"
    if address.is_unspecified:
        return "an unspecified"
    if address.is_private or address.is_reserved or not address.is_global:
        return "a private"
    return None


def _connection(target: Target, address: str, timeout: float) -> http.client.HTTPConnection:
    """A connection to `address`, the one checked, that still speaks to (and for TLS verifies) `target.host`."""
    if target.scheme == "https":
        return _PinnedHTTPS(target.host, address, target.port, timeout)
    return _PinnedHTTP(target.host, address, target.port, timeout)


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, host: str, address: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host: str, address: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]
