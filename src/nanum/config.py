"""Where nanum keeps things: the state directory and the CLI's credentials file."""

from __future__ import annotations

import json
import os
from pathlib import Path

#: Where nanum keeps its state when root runs it without `$NANUM_HOME`: the jobs it runs as their users reach their
#: checkpoint directories and preemption notices under it, which they cannot under /root (closed to them).
SYSTEM_HOME = Path("/var/lib/nanum")


def default_home() -> Path:
    """`$NANUM_HOME`; else, for root, `/var/lib/nanum` (`SYSTEM_HOME`), unless an earlier run keeps its state in
    `~/.local/share/nanum` already, which is then used still; else `~/.local/share/nanum`."""
    env = os.environ.get("NANUM_HOME")
    if env:
        return Path(env)
    personal = Path.home() / ".local" / "share" / "nanum"
    return SYSTEM_HOME if os.geteuid() == 0 and not personal.exists() else personal


def credentials_path() -> Path:
    """`$XDG_CONFIG_HOME/nanum/credentials.json` (default `~/.config/nanum/credentials.json`)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "nanum" / "credentials.json"


def load_credentials() -> dict[str, str]:
    path = credentials_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: str(v) for k, v in data.items() if k in ("server", "token")}


def save_credentials(server: str, token: str) -> Path:
    """Write the server URL and token for the CLI, readable by the owner only."""
    path = credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"server": server, "token": token}, f)
    os.chmod(path, 0o600)
    return path
