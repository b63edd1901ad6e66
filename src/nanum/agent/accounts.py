"""Which Unix account a job runs as, and whether this agent may run it at all.

An agent running as root runs each job as its owner's account (uid, primary gid and supplementary groups) and
refuses uid 0 unless the server allows root jobs. An agent running as a normal user can only run that user's
own jobs. A refusal is a `Refused` exception whose message is the reason reported to the server, in one
sentence.

An account found is kept for `KEEP_S` seconds: listing a user's groups reads every group the system knows (0.2 ms
with 60 local groups, far more through LDAP), which each of a run of one user's jobs would pay. A change to a
user's groups reaches the jobs started `KEEP_S` later; a name without an account is looked up every time.
"""

from __future__ import annotations

import os
import pwd
import threading
import time
from dataclasses import dataclass

__all__ = ["Account", "Refused", "agent_account", "job_account"]


class Refused(Exception):
    """The job cannot start on this node; the message says why and, where it can, how to fix it."""


@dataclass(frozen=True, slots=True)
class Account:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    shell: str

    @classmethod
    def from_pw(cls, pw: pwd.struct_passwd) -> Account:
        try:
            groups = tuple(os.getgrouplist(pw.pw_name, pw.pw_gid))
        except OSError:
            groups = (pw.pw_gid,)
        return cls(pw.pw_name, pw.pw_uid, pw.pw_gid, groups, pw.pw_dir, pw.pw_shell or "/bin/sh")


def agent_account() -> Account:
    """The account this agent runs as."""
    uid = os.geteuid()
    try:
        return Account.from_pw(pwd.getpwuid(uid))
    except KeyError:
        home = os.environ.get("HOME", "/")
        return Account(str(uid), uid, os.getegid(), tuple(os.getgroups()), home, "/bin/sh")


def job_account(unix_user: str, *, node: str, allow_root: bool, agent: Account | None = None) -> Account:
    """The account to run a job of `unix_user` as on this node, or `Refused` with the reason."""
    agent = agent or agent_account()
    if agent.uid != 0:
        return _own_job(unix_user, agent)
    if not unix_user:
        raise Refused("the job names no Unix user to run as")
    account = _looked_up(unix_user)
    if account is None:
        raise Refused(f"user {unix_user!r} has no Unix account on node {node}")
    if account.uid == 0 and not allow_root:
        raise Refused(
            "jobs may not run as root on this node; submit as a normal user, or ask an admin to allow root jobs"
        )
    return account


#: Seconds an account looked up is kept (`job_account`).
KEEP_S = 10.0
_kept: dict[str, tuple[float, Account]] = {}
_kept_lock = threading.Lock()


def _looked_up(name: str) -> Account | None:
    """The account `name` (None when there is none: not kept, so a new account is found at once)."""
    now = time.monotonic()
    with _kept_lock:
        kept = _kept.get(name)
    if kept is not None and now - kept[0] < KEEP_S:
        return kept[1]
    try:
        account = Account.from_pw(pwd.getpwnam(name))
    except KeyError:
        return None
    with _kept_lock:
        if len(_kept) > 10_000:  # names come from the server; keep the table bounded
            _kept.clear()
        _kept[name] = (now, account)
    return account


def _own_job(unix_user: str, agent: Account) -> Account:
    if unix_user in ("", agent.name):
        return agent
    raise Refused(
        f"the job runs as Unix user {unix_user!r} but the agent on this node runs as {agent.name!r} "
        "and can only run that user's jobs; run the agent as root to launch jobs as their owners"
    )
