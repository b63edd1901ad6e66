"""Starting nanum: the first start creates the admin and the node token, later starts keep them; `nanum server`
serves until SIGTERM and then stops cleanly."""

from __future__ import annotations

import getpass
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from nanum.server.callers import hash_token
from nanum.server.runtime import StartError, bootstrap_admin, bootstrap_node, connection_note, prepare
from nanum.server.services import logins
from nanum.server.settings import ServerSettings
from nanum.store import Database
from nanum.store.db import POOL_MAX
from tests.ports import free_port
from tests.store.databases import PG_URL


@pytest.fixture(autouse=True)
def _own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def test_first_start_creates_the_admin_and_later_starts_keep_the_token(tmp_path: Path) -> None:
    settings = ServerSettings(home=tmp_path / "home")
    ctx = prepare(settings)
    first = bootstrap_admin(ctx, "http://127.0.0.1:8765")
    assert first.created_admin
    token_file = settings.home / "admin-token"
    assert token_file.read_text().strip() == first.admin_token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((settings.home / "nanum.db").stat().st_mode) == 0o600
    assert stat.S_IMODE(settings.home.stat().st_mode) == 0o711  # jobs reach their checkpoint directories
    creds = (tmp_path / "config" / "nanum" / "credentials.json").read_text()
    assert first.admin_token in creds and "http://127.0.0.1:8765" in creds
    again = bootstrap_admin(prepare(settings), "http://127.0.0.1:9000")
    assert not again.created_admin and again.admin_token == first.admin_token
    assert "9000" in (tmp_path / "config" / "nanum" / "credentials.json").read_text()


def test_a_lost_admin_token_file_gets_a_new_token_for_the_same_admin(tmp_path: Path) -> None:
    settings = ServerSettings(home=tmp_path / "home")
    first = bootstrap_admin(prepare(settings), "http://x")
    (settings.home / "admin-token").unlink()
    second = bootstrap_admin(prepare(settings), "http://x")
    assert not second.created_admin and second.admin_token != first.admin_token
    assert (settings.home / "admin-token").read_text().strip() == second.admin_token
    third = bootstrap_admin(prepare(settings), "http://x")  # now known: kept
    assert third.admin_token == second.admin_token


def test_a_second_servers_home_on_the_same_database_does_not_cut_off_the_first(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'shared.db'}"
    one, two = (ServerSettings(home=tmp_path / name, db_url=db) for name in ("one", "two"))
    first = bootstrap_admin(prepare(one), "http://one")
    second = bootstrap_admin(prepare(two), "http://two")
    assert not second.created_admin and second.admin_token != first.admin_token
    ctx = prepare(one)
    for token in (first.admin_token, second.admin_token):  # both still log the admin in
        found = logins.caller_by_token_hash(ctx, hash_token(token))
        assert found is not None and found.admin


def test_the_node_token_is_created_once(tmp_path: Path) -> None:
    ctx = prepare(ServerSettings(home=tmp_path / "home"))
    name, token = bootstrap_node(ctx)
    assert name == socket.gethostname().split(".")[0]
    assert bootstrap_node(ctx) == (name, token)
    assert stat.S_IMODE((tmp_path / "home" / "node-token").stat().st_mode) == 0o600


def test_an_unreachable_database_is_one_clear_line(tmp_path: Path) -> None:
    settings = ServerSettings(home=tmp_path, db_url="postgresql+psycopg://nobody:secret@127.0.0.1:1/none")
    with pytest.raises(StartError) as err:
        prepare(settings)
    assert str(err.value).startswith("cannot open the database postgresql+psycopg://nobody:***@127.0.0.1:1/none")
    assert "secret" not in str(err.value)


@pytest.mark.e2e
def test_nanum_server_serves_until_sigterm(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "nanum.cli", "server", "--home", str(tmp_path / "home"), "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/v1/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        token = (tmp_path / "home" / "admin-token").read_text().strip()
        me = httpx.get(f"http://127.0.0.1:{port}/api/v1/me", headers={"Authorization": f"Bearer {token}"}).json()
        assert me["name"] == getpass.getuser() and me["admin"] and me["default_lab"] == "default"
        clash = subprocess.run(
            [sys.executable, "-m", "nanum.cli", "server", "--home", str(tmp_path / "other"), "--port", str(port)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert clash.returncode == 1 and f"port {port}" in clash.stderr and "Traceback" not in clash.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert b"nanum stopped" in out and b"Traceback" not in out


@pytest.mark.postgres
def test_more_workers_than_postgresql_takes_connections_for_are_warned_of(tmp_path: Path) -> None:
    db = Database(PG_URL)
    try:
        with db.engine.connect() as conn:
            allowed = int(conn.exec_driver_sql("SHOW max_connections").scalar_one())
            reserved = int(conn.exec_driver_sql("SHOW superuser_reserved_connections").scalar_one())
        too_many = (allowed - reserved) // POOL_MAX + 1
        note = connection_note(db, too_many)
        assert note is not None
        assert f"up to {too_many * POOL_MAX} database connections" in note
        assert f"max_connections {allowed}" in note and f"at least {too_many * POOL_MAX + reserved}" in note
        assert connection_note(db, too_many - 1) is None
    finally:
        db.dispose()
    assert connection_note(Database(f"sqlite:///{tmp_path / 'n.db'}"), 64) is None  # one process writes there
