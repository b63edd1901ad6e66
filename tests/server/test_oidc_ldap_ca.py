"""`--ldap-ca-file`: an ldaps:// directory's certificate is checked against the CA given (a real slapd with TLS):
logins work when it chains to that CA, and are refused as "cannot be reached" when it does not."""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nanum.server.app import create_app
from nanum.server.context import ServerContext
from nanum.server.settings import LdapSettings, ServerSettings
from nanum.store import Database
from tests.directory import Directory
from tests.e2e.cluster import nanum_command
from tests.server.asgiclient import serve


def _ca(root: Path, name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    (root / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _server_cert(root: Path, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False).sign(ca_key, hashes.SHA256()))
    pem, pkey = root / "ldap.pem", root / "ldap.key"
    pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pkey.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return pem, pkey


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Directory, Path]]:
    root = tmp_path_factory.mktemp("ldaps")
    ca, ca_key = _ca(root, "campus-ca")
    _ca(root, "another-ca")
    with Directory(root, tls=_server_cert(root, ca, ca_key)) as d:
        d.add_user("kim", uid_number=2001, password="kim-pw", groups=("vision",))
        yield d, root


@pytest.mark.parametrize(("ca", "status"), [
    pytest.param("campus-ca", 200, id="its-ca"),
    pytest.param("another-ca", 503, id="another-ca"),
])
def test_the_directory_certificate_must_chain_to_the_ca_file(
    database: Database, tmp_path: Path, directory: tuple[Directory, Path], ca: str, status: int
) -> None:
    d, root = directory
    assert d.url.startswith("ldaps://")
    ldap = LdapSettings(url=d.url, base=d.base, bind_dn=d.admin_dn, bind_password=d.admin_password,
                        ca_file=str(root / f"{ca}.pem"), timeout_s=5)
    app = create_app(ServerContext.create(ServerSettings(home=tmp_path / "home", ldap=ldap), database),
                     run_scheduler=False)
    with serve(app) as c:
        r = c.post("/api/v1/login", json={"username": "kim", "password": "kim-pw"})
        assert r.status_code == status, r.text
        if status == 503:
            assert r.json()["detail"].startswith("the directory cannot be reached just now")
        else:
            assert r.json()["labs"] == ["vision"]
    app.state.scheduler.leadership.release()


@pytest.mark.parametrize(("args", "message"), [
    pytest.param(["--ldap-url", "ldap://h", "--ldap-base", "dc=x", "--ldap-ca-file", "/etc/hostname"],
                 "--ldap-ca-file verifies an ldaps:// directory's certificate; give --ldap-url ldaps://HOST",
                 id="not-ldaps"),
    pytest.param(["--ldap-url", "ldaps://h", "--ldap-base", "dc=x", "--ldap-ca-file", "/nonexistent.pem"],
                 "cannot read --ldap-ca-file /nonexistent.pem: no such file; give the CA certificates in PEM",
                 id="no-file"),
    pytest.param(["--oidc-client-id", "nanum"], "the --oidc-* options need --oidc-issuer (the provider's URL, e.g. "
                 "https://sso.uni.example/realms/uni)", id="oidc-without-issuer"),
    pytest.param(["--oidc-issuer", "https://sso.example", "--oidc-client-id", "x", "--oidc-group-lab", "("],
                 "--oidc-group-lab: missing ), unterminated subpattern at position 0; give a regular expression "
                 "such as '^/(.*)-lab$'", id="oidc-bad-regex"),
])
def test_bad_login_options_are_refused_before_anything_starts(
    tmp_path: Path, args: list[str], message: str
) -> None:
    done = subprocess.run([*nanum_command(), "server", "--home", str(tmp_path), *args], capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stderr) == (2, f"nanum: error: {message}\n")


def test_a_client_secret_file_others_may_read_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    secret.chmod(0o644)
    done = subprocess.run([*nanum_command(), "server", "--home", str(tmp_path), "--oidc-issuer", "https://sso.example",
                           "--oidc-client-id", "nanum", "--oidc-client-secret-file", str(secret)],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (2, f"nanum: error: {secret} may be read or changed by other users; run "
                                                 f"`chmod 600 {secret}`\n")
