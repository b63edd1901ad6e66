"""Unix accounts the tests run jobs as: created once per machine, by whichever test process asks first.

Tests run in parallel processes (`pytest -n`), so two of them may ask for the same account at once: `useradd`
then fails for the second with "already exists" (9), or with "cannot lock /etc/passwd" (10) while the first
holds the lock. Both mean "look again", which is what `unix_account` does.
"""

from __future__ import annotations

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
        return pwd.getpwnam(name)
    except KeyError:
        pass
    args = ["useradd", "-m" if home else "-M", "-s", "/bin/sh"]
    if groups:
        args += ["-G", ",".join(groups)]
    _retry([*args, name])
    return pwd.getpwnam(name)


def _retry(args: list[str]) -> None:
    for _ in range(50):
        done = subprocess.run(args, capture_output=True, text=True)
        if done.returncode in (0, _EXISTS):
            return
        if done.returncode != _LOCKED:
            break
        time.sleep(0.1)
    raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
