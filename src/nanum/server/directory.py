"""LDAP: people log in with their directory account; the directory says who they are, which Unix account (and
uid) their jobs run as, which labs they belong to, and whether they may still come in.

A login searches `base` (bound as `bind_dn`, or anonymously) for one `posixAccount` whose `uid` is the name
typed, checks the password by binding as that entry, and reads `uidNumber`, `mail` and the groups that list the
person (`posixGroup` by `memberUid`, `groupOfNames`/`groupOfUniqueNames` by DN). A group whose DN matches
`group_lab` (a regular expression; its first group is the lab's name) makes the person a member of that lab.
An entry is disabled when `shadowExpire` is in the past, or `pwdAccountLockedTime` or `nsAccountLock: TRUE` is
set. Uses ldap3, a maintained pure-Python client (no C library to build). With `ca_file`, an ldaps:// directory's
certificate must chain to those CAs and name the host; a directory that fails this cannot be reached (503).
"""

from __future__ import annotations

import ipaddress
import re
import ssl
import time
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from nanum.server.settings import LdapSettings

with warnings.catch_warnings():  # ldap3 2.9 uses names that pyasn1 0.6 deprecates, once, at import
    warnings.simplefilter("ignore", DeprecationWarning)
    import ldap3
    from ldap3.core import tls as _ldap3_tls
    from ldap3.core.exceptions import LDAPException
    from ldap3.utils.conv import escape_filter_chars
    from ldap3.utils.tls_backport import CertificateError
    from ldap3.utils.tls_backport import match_hostname as _match_dns_name

_LAB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_ATTRS = ["uid", "uidNumber", "mail", "shadowExpire", "pwdAccountLockedTime", "nsAccountLock"]


def _match_hostname(cert: dict[str, Any], hostname: str) -> None:
    """Whether an ldaps:// certificate names the host: ldap3 2.9 asks ssl.match_hostname, deprecated since Python
    3.7 and gone in 3.12 (where ldap3 uses its own copy, which takes no IP addresses); this is that check, with
    IP addresses matched against the certificate's IP Address names."""
    try:
        address = ipaddress.ip_address(hostname)
    except ValueError:
        _match_dns_name(cert, hostname)
        return
    for kind, value in cert.get("subjectAltName", ()):
        if kind == "IP Address" and ipaddress.ip_address(value.strip()) == address:
            return
    raise CertificateError(f"the certificate is not for {hostname}")


_ldap3_tls.match_hostname = _match_hostname


@dataclass(frozen=True, slots=True)
class DirectoryUser:
    uid: str
    dn: str
    uid_number: int | None
    email: str | None
    labs: tuple[str, ...]


class DirectoryUnavailable(Exception):
    """The directory could not be asked (down, refused the service bind): nobody's standing is known."""


class LoginRefused(Exception):
    """The directory said no: unknown name, wrong password, or a disabled account (the message says which)."""


class Directory:
    """The directory of one server's settings (`directory_for`)."""

    def __init__(self, settings: LdapSettings) -> None:
        self.settings = settings
        self.group_lab = re.compile(settings.group_lab, re.IGNORECASE)
        tls = None
        if settings.ca_file:  # verify the ldaps:// certificate (and its host name) against these CAs
            tls = ldap3.Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=settings.ca_file)
        self.server = ldap3.Server(settings.url, connect_timeout=settings.timeout_s, get_info=ldap3.NONE, tls=tls)

    def authenticate(self, username: str, password: str) -> DirectoryUser:
        """The person, when the name and password are right and the account is enabled; else LoginRefused."""
        if not password:
            raise LoginRefused("wrong username or password")
        entry = self._find(username)
        if entry is None:
            raise LoginRefused("wrong username or password")
        if not self._bind_ok(entry["dn"], password):
            raise LoginRefused("wrong username or password")
        if why := disabled(entry["attributes"]):
            raise LoginRefused(f"the directory account {username} is {why}; ask your administrator")
        return self._person(entry)

    def standing(self, username: str) -> str | None:
        """None when `username` is still an enabled person in the directory; else why not."""
        entry = self._find(username)
        if entry is None:
            return "no longer in the directory"
        return disabled(entry["attributes"])

    def _find(self, username: str) -> dict[str, Any] | None:
        query = f"(&(objectClass=posixAccount)(uid={escape_filter_chars(username)}))"
        conn = self._service()
        try:
            conn.search(self.settings.base, query, attributes=_ATTRS, size_limit=2)
            found = [e for e in conn.response if e.get("type") == "searchResEntry"]
            if len(found) != 1:
                return None
            entry = dict(found[0])
            entry["groups"] = self._groups(conn, username, entry["dn"])
            return entry
        except LDAPException as exc:
            raise DirectoryUnavailable(f"cannot search the directory at {self.settings.url}: {exc}") from exc
        finally:
            conn.unbind()

    def _groups(self, conn: ldap3.Connection, uid: str, dn: str) -> list[str]:
        query = (f"(|(&(objectClass=posixGroup)(memberUid={escape_filter_chars(uid)}))"
                 f"(member={escape_filter_chars(dn)})(uniqueMember={escape_filter_chars(dn)}))")
        conn.search(self.settings.base, query, attributes=["cn"])
        return [str(e["dn"]) for e in conn.response if e.get("type") == "searchResEntry"]

    def _person(self, entry: dict[str, Any]) -> DirectoryUser:
        attrs = entry["attributes"]
        labs = []
        for group in entry["groups"]:
            if (m := self.group_lab.search(group)) and _LAB_NAME.match(lab := m.group(1) if m.groups() else ""):
                labs.append(lab)
        number = _first(attrs.get("uidNumber"))
        return DirectoryUser(uid=str(_first(attrs.get("uid"))), dn=str(entry["dn"]),
                             uid_number=int(number) if number is not None else None,
                             email=_first(attrs.get("mail")), labs=tuple(sorted(set(labs))))

    def _service(self) -> ldap3.Connection:
        s = self.settings
        try:
            return ldap3.Connection(self.server, user=s.bind_dn, password=s.bind_password, auto_bind=True,
                                    receive_timeout=s.timeout_s, read_only=True)
        except LDAPException as exc:
            raise DirectoryUnavailable(f"cannot search the directory at {s.url}: {exc}") from exc

    def _bind_ok(self, dn: str, password: str) -> bool:
        conn = ldap3.Connection(self.server, user=dn, password=password, receive_timeout=self.settings.timeout_s)
        try:
            return bool(conn.bind())
        except LDAPException as exc:
            raise DirectoryUnavailable(f"cannot check a password at {self.settings.url}: {exc}") from exc
        finally:
            conn.unbind()


def disabled(attrs: dict[str, Any]) -> str | None:
    """Why a directory entry may not log in (expired, locked), or None."""
    expire = _first(attrs.get("shadowExpire"))
    if expire not in (None, "", -1) and int(expire) >= 0 and int(expire) * 86400 <= time.time():
        return "expired"
    if attrs.get("pwdAccountLockedTime"):
        return "locked"
    if str(_first(attrs.get("nsAccountLock")) or "").upper() == "TRUE":
        return "locked"
    return None


def _first(value: Any) -> Any:
    if isinstance(value, list):
        return value[0] if value else None
    return value


@lru_cache(maxsize=8)
def directory_for(settings: LdapSettings) -> Directory:
    return Directory(settings)
