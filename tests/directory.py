"""A real OpenLDAP directory for the tests: Debian's `slapd` on a free loopback port, with a generated tree of
people (posixAccount, shadowAccount, inetOrgPerson) and groups (posixGroup), started and stopped by the test.

    with Directory(tmp_path) as d:
        d.add_user("kim", uid_number=2001, password="pw", groups=["vision-lab"])
        d.url, d.base, d.admin_dn, d.admin_password

`Directory(root, tls=(cert, key))` serves ldaps:// instead, with that certificate.

Skips the test when slapd is not installed (`apt-get install slapd ldap-utils`; .ci/run does it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import pytest

from tests.ports import free_port

SLAPD = "/usr/sbin/slapd"
SCHEMAS = ("core", "cosine", "nis", "inetorgperson")
BASE = "dc=uni,dc=example"
ADMIN_DN = f"cn=admin,{BASE}"


class Directory:
    """One slapd with its own database under `root`; people under ou=people, groups under ou=groups."""

    def __init__(self, root: Path, admin_password: str = "directory-secret",
                 tls: tuple[Path, Path] | None = None) -> None:
        if not Path(SLAPD).exists() or shutil.which("ldapmodify") is None:
            pytest.skip("needs OpenLDAP's slapd and ldap-utils (apt-get install slapd ldap-utils)")
        self.root, self.admin_password = root / "slapd", admin_password
        self.port = free_port()
        self.base, self.admin_dn = BASE, ADMIN_DN
        self.proc: subprocess.Popen[bytes] | None = None
        #: (certificate, key) in PEM: slapd then speaks ldaps:// only.
        self.tls = tls

    @property
    def url(self) -> str:
        return f"{'ldaps' if self.tls else 'ldap'}://127.0.0.1:{self.port}"

    def __enter__(self) -> Directory:
        self.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        (self.root / "db").mkdir(parents=True)
        conf = self.root / "slapd.conf"
        conf.write_text("\n".join([
            *(f"include /etc/ldap/schema/{name}.schema" for name in SCHEMAS),
            f"pidfile {self.root}/slapd.pid", "modulepath /usr/lib/ldap", "moduleload back_mdb",
            "database mdb", f'suffix "{BASE}"', f'rootdn "{ADMIN_DN}"', f"rootpw {self.admin_password}",
            f"directory {self.root}/db", "maxsize 10485760",
            "access to attrs=userPassword by anonymous auth by self write by * none",
            "access to * by * read",
            *([f"TLSCertificateFile {self.tls[0]}", f"TLSCertificateKeyFile {self.tls[1]}"] if self.tls else []),
            ""]))
        seed = self.root / "seed.ldif"
        seed.write_text(f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\no: uni\ndc: uni\n\n"
                        f"dn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people\n\n"
                        f"dn: ou=groups,{BASE}\nobjectClass: organizationalUnit\nou: groups\n")
        subprocess.run(["slapadd", "-f", str(conf), "-l", str(seed)], check=True, capture_output=True)
        with (self.root / "slapd.log").open("wb") as log:
            self.proc = subprocess.Popen([SLAPD, "-f", str(conf), "-h", f"{self.url}/", "-d", "0"],
                                         stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 15
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"slapd did not start: {(self.root / 'slapd.log').read_text()[-2000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)  # reaped: no process left behind for the interpreter to warn about

    def _answers(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def ldif(self, text: str, modify: bool = False) -> None:
        """Apply LDIF as the directory's admin (`ldapadd`, or `ldapmodify` with changetypes)."""
        tool = "ldapmodify" if modify else "ldapadd"
        env = {**os.environ, "LDAPTLS_REQCERT": "never"}  # the test's own tools need not check the test's CA
        done = subprocess.run([tool, "-x", "-H", self.url, "-D", ADMIN_DN, "-w", self.admin_password],
                              input=text.encode(), capture_output=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed: {done.stderr.decode()}")

    def user_dn(self, uid: str) -> str:
        return f"uid={uid},ou=people,{BASE}"

    def add_user(self, uid: str, *, uid_number: int, password: str, groups: tuple[str, ...] = (),
                 mail: str | None = None) -> None:
        """A person who can log in (posixAccount with uidNumber), a member of each group (made if missing)."""
        self.ldif(f"dn: {self.user_dn(uid)}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
                  f"objectClass: shadowAccount\nuid: {uid}\ncn: {uid}\nsn: {uid}\nuidNumber: {uid_number}\n"
                  f"gidNumber: {uid_number}\nhomeDirectory: /home/{uid}\nuserPassword: {password}\n"
                  + (f"mail: {mail}\n" if mail else ""))
        for group in groups:
            self.join(uid, group)

    def join(self, uid: str, group: str) -> None:
        dn = f"cn={group},ou=groups,{BASE}"
        try:
            self.ldif(f"dn: {dn}\nchangetype: modify\nadd: memberUid\nmemberUid: {uid}\n", modify=True)
        except RuntimeError:
            number = 5000 + sum(map(ord, group)) % 1000
            self.ldif(f"dn: {dn}\nobjectClass: posixGroup\ncn: {group}\ngidNumber: {number}\nmemberUid: {uid}\n")

    def disable(self, uid: str) -> None:
        """Expire the account (shadowExpire in the past), as directories disable people who left."""
        self.ldif(f"dn: {self.user_dn(uid)}\nchangetype: modify\nadd: shadowExpire\nshadowExpire: 1\n", modify=True)

    def remove(self, uid: str) -> None:
        self.ldif(f"dn: {self.user_dn(uid)}\nchangetype: delete\n", modify=True)
