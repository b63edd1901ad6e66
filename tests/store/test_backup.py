"""Backup and restore of a server's state as docs/operations.md tells operators to do it: an online
`sqlite3 .backup` of the database while the real server runs, a tar of the rest of its home, and a restore
into another home that a new server then serves: users, their tokens, node tokens and jobs all still work."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.e2e.cluster import free_port, nanum_command

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("sqlite3") is None, reason="needs the sqlite3 command-line shell"),
]


@contextmanager
def nanum_server(home: Path, log: Path) -> Iterator[tuple[httpx.Client, str]]:
    """A real `nanum server` over `home`: an HTTP client on its API and its admin token."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANUM_")}
    env["XDG_CONFIG_HOME"] = str(home.parent / "config")
    with log.open("ab") as out:
        proc = subprocess.Popen([*nanum_command(), "server", "--home", str(home), "--port", str(port)], env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}/api/v1", timeout=10) as client:
            deadline = time.monotonic() + 60
            while not _healthy(client):
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            yield client, (home / "admin-token").read_text().strip()
    finally:
        proc.terminate()
        proc.wait(30)


def _healthy(client: httpx.Client) -> bool:
    try:
        return client.get("/health").status_code == 200
    except httpx.TransportError:
        return False


def _as(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _sh(command: str) -> None:
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
    assert done.returncode == 0, f"{command}: {done.stderr}"


def test_an_online_backup_restores_users_tokens_nodes_and_jobs(tmp_path: Path) -> None:
    home, backup, restored = tmp_path / "home", tmp_path / "backup", tmp_path / "restored"
    backup.mkdir()
    with nanum_server(home, tmp_path / "server.log") as (api, admin):
        alice = api.post("/users", json={"name": "alice", "labs": ["vision"]}, headers=_as(admin)).json()["token"]
        node = api.post("/nodes", json={"name": "gpu-01"}, headers=_as(admin)).json()["token"]
        jobs = [api.post("/jobs", json={"command": ["train.py", str(i)], "workdir": "/tmp", "gpus": 1},
                         headers=_as(alice)).json()["id"] for i in range(3)]
        assert api.post(f"/jobs/{jobs[1]}/cancel", headers=_as(alice)).status_code == 200
        before = api.get("/jobs?all=true", headers=_as(alice)).json()
        # Taken while the server runs, as docs/operations.md says.
        _sh(f"sqlite3 {home}/nanum.db \".backup '{backup}/nanum.db'\"")
        _sh(f"tar -C {home} --exclude='./nanum.db*' -czf {backup}/home.tar.gz .")
        api.post("/jobs", json={"command": ["after-the-backup"], "workdir": "/tmp"}, headers=_as(alice))
    restored.mkdir()
    _sh(f"tar -C {restored} -xzf {backup}/home.tar.gz")
    _sh(f"rm -f {restored}/nanum.db-wal {restored}/nanum.db-shm")
    _sh(f"cp {backup}/nanum.db {restored}/nanum.db")
    with nanum_server(restored, tmp_path / "restored.log") as (api, admin_after):
        assert admin_after == admin  # the admin token file came back with the home: not replaced
        assert api.get("/me", headers=_as(alice)).json()["name"] == "alice"
        after = api.get("/jobs?all=true", headers=_as(alice)).json()
        assert [(j["id"], j["state"], j["command"]) for j in after] == [
            (j["id"], j["state"], j["command"]) for j in before
        ]
        gpus = [{"index": 0, "uuid": "GPU-0", "model": "A100", "memory_mb": 81920}]
        beat = {"node": {"name": "gpu-01", "hostname": "gpu-01", "gpus": gpus, "cpus": 8, "memory_mb": 65536,
                         "unix_user": "root"}}
        assert api.post("/agent/heartbeat", json=beat, headers=_as(node)).status_code == 200
        new = api.post("/jobs", json={"command": ["again"], "workdir": "/tmp"}, headers=_as(alice))
        assert new.status_code == 201, new.text
        assert new.json()["id"] > max(jobs)
        assert api.get("/me", headers=_as("not-a-token")).status_code == 401
