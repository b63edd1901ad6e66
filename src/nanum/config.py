"""Where nanum keeps things: the state directory and the CLI's credentials file."""

from __future__ import annotations

import json
import os
from pathlib import Path


def default_home() -> Path:
    """`$NANUM_HOME`, else `~/.local/share/nanum`."""
    env = os.environ.get("NANUM_HOME")
    return Path(env) if env else Path.home() / ".local" / "share" / "nanum"


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
