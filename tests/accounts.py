"""Unix accounts the tests run jobs as: created once per machine, by whichever test process asks first.

Tests run in parallel processes (`pytest -n`), so two of them may ask for the same account at once: `useradd`
then fails for the second with "already exists" (9), or with "cannot lock /etc/passwd" (10) while the first
holds the lock. Both mean "look again", which is what `unix_account` does.

An account removed and made again by name gets a new uid, while `useradd -m` keeps the home directory it finds,
owned by the old one: the account could then not write its own home (a notebook failed on `~/.local`). A test
account's home is given back to it.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import time

_EXISTS, _LOCKED = 9, 10


def unix_account(name: str, *, home: bool = False, groups: tuple[str, ...] = ()) -> pwd.struct_passwd:
    """The account `name`, created (with a home directory when `home`, in `groups`, which are created too) if it
    does not exist yet."""
    for group in groups:
        _retry(["groupadd", "-f", group])
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        args = ["useradd", "-m" if home else "-M", "-s", "/bin/sh"]
        if groups:
            args += ["-G", ",".join(groups)]
        _retry([*args, name])
        account = pwd.getpwnam(name)
    if home:
        _own_home(account)
    return account


def _own_home(account: pwd.struct_passwd) -> None:
    """Make `account`'s home directory (created if missing) and what is in it its own."""
    os.makedirs(account.pw_dir, mode=0o755, exist_ok=True)
    if os.stat(account.pw_dir).st_uid == account.pw_uid:
        return
    for top, dirs, files in os.walk(account.pw_dir):
        for path in [top, *(os.path.join(top, n) for n in dirs + files)]:
            os.lchown(path, account.pw_uid, account.pw_gid)


def _retry(args: list[str]) -> None:
    for _ in range(50):
        done = subprocess.run(args, capture_output=True, text=True)
        if done.returncode in (0, _EXISTS):
            return
        if done.returncode != _LOCKED:
            break
        time.sleep(0.1)
    raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
