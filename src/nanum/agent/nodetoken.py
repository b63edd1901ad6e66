"""Where an agent finds its node token: a file only its own account can read, or `$NANUM_NODE_TOKEN`.

Never the command line: every local user can read a process's arguments (`ps`, `/proc/PID/cmdline`), and whoever
has the token can heartbeat as the node. Like ssh with a private key, a token file that its group or other users
could read or write is refused, and so is one that belongs to another account.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Mapping
from pathlib import Path

ENV_VAR = "NANUM_NODE_TOKEN"


class TokenError(Exception):
    """The node token cannot be had safely; the message says what to do."""


def resolve(token_file: Path | None, environ: Mapping[str, str]) -> str:
    """The node token: from `token_file` when given, else from `$NANUM_NODE_TOKEN`."""
    if token_file is not None:
        return read_token_file(token_file)
    token = environ.get(ENV_VAR, "").strip()
    if not token:
        raise TokenError(
            "no node token: put the token from `nanum node add NAME` in a file only you can read "
            f"(chmod 600 FILE) and pass --token-file FILE, or set {ENV_VAR}"
        )
    return token


def read_token_file(path: Path) -> str:
    """The token in `path`, refused unless the file is the agent's account's own and private to it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NOCTTY)
    except FileNotFoundError:
        raise TokenError(f"token file {path} does not exist; save the token from `nanum node add NAME` there") from None
    except OSError as exc:
        why = "is a symbolic link" if os.path.islink(path) else f"cannot be read ({exc.strerror})"
        raise TokenError(f"token file {path} {why}; give --token-file the token file itself") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        _check(path, st)
        token = f.read(4096).decode("utf-8", "replace").strip()
    if not token:
        raise TokenError(f"token file {path} is empty; save the token from `nanum node add NAME` there")
    return token


def _check(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise TokenError(f"token file {path} is not a regular file; give --token-file the token file itself")
    me = os.geteuid()
    if st.st_uid != me:
        raise TokenError(
            f"token file {path} belongs to {_user(st.st_uid)}, not to {_user(me)} who runs the agent; "
            f"run `chown {_user(me)} {path}`"
        )
    if st.st_mode & 0o077:
        raise TokenError(
            f"token file {path} can be read or written by other users (mode {stat.S_IMODE(st.st_mode):03o}); "
            f"run `chmod 600 {path}`"
        )


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
