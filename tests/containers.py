"""A container image built here, for tests of container environments: no image can be pulled, so a busybox
rootfs is imported into a Podman store of the test's own (its CONTAINERS_CONF and storage, never the machine's).

Podman runs containers with runc on this kind of host when its containers.conf sets `default_ulimits = []` and
`runtime = "runc"`; tests that need it skip, saying why, where Podman or busybox is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

IMAGE = "localhost/nanum-test-busybox:1"
TOOLS = ("sh", "id", "cat", "echo", "ls", "touch", "sleep", "env", "pwd", "mkdir", "test", "[")


def podman_missing() -> str | None:
    """Why container tests cannot run here, or None."""
    if not shutil.which("podman"):
        return "podman is not installed (apt-get install podman runc busybox-static)"
    if not (shutil.which("busybox") and _static(shutil.which("busybox") or "")):
        return "busybox-static is not installed"
    if os.geteuid() != 0:
        return "container jobs as another user need root (the agent runs podman as root)"
    return None


def _static(path: str) -> bool:
    out = subprocess.run(["file", "-L", path], capture_output=True, text=True).stdout if shutil.which("file") else ""
    return "statically linked" in out or not out


def podman_env(root: Path) -> dict[str, str]:
    """CONTAINERS_CONF and CONTAINERS_STORAGE_CONF for a store under `root`, with the image imported.

    `root` must be a short path (a directory right under /tmp): Podman keeps Unix sockets under the store's run
    directory, and with a root as long as pytest's per-worker temporary directories a container's end was never
    noticed (`podman run` hung until its job was killed)."""
    root.mkdir(parents=True, exist_ok=True)
    conf, storage = root / "containers.conf", root / "storage.conf"
    conf.write_text('[containers]\ndefault_ulimits = []\n[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n'
                    'events_logger = "file"\n')
    storage.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{root}/store"\nrunroot = "{root}/run"\n')
    env = {"CONTAINERS_CONF": str(conf), "CONTAINERS_STORAGE_CONF": str(storage)}
    tarball = root / "rootfs.tar"
    with tarfile.open(tarball, "w") as tar:
        busybox = shutil.which("busybox")
        assert busybox is not None
        tar.add(busybox, "bin/busybox")
        for tool in TOOLS:
            link = tarfile.TarInfo(f"bin/{tool}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        for directory in ("tmp", "etc", "datasets"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
    done = subprocess.run(["podman", "import", str(tarball), IMAGE], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        pytest.skip(f"podman cannot import an image here: {done.stderr.strip()[-300:]}")
    return env


def remove_store(root: Path, env: dict[str, str]) -> None:
    subprocess.run(["podman", "rm", "-a", "-f"], env={**os.environ, **env}, capture_output=True, timeout=120)
    shutil.rmtree(root, ignore_errors=True)
