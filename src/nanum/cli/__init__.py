"""The `nanum` command line. Command modules are imported here so they register on the app.

`nanum submit`, `ps`, `show` and `cancel` run in shell loops, so `main` imports only the module that defines the
command given (`COMMANDS`); `nanum --help`, a command not in the table and a mistyped one load them all (help
lists every command; a typo gets its suggestion). A test checks the table against what each module registers.
`submit`, `ps`, `show` and `cancel` are first offered to the quick path (`nanum.cli.fast`), which runs them
without click or Typer when it can parse them as they would.
"""

from __future__ import annotations

import importlib
import sys

COMMAND_MODULES = ("demo", "jobs", "control", "admin", "agent", "runtime", "sim", "sharing", "monitoring", "sweep",
                   "report", "sessions", "environments")
#: command -> the module that registers it (only modules that register two or more: with one command
#: registered, Typer would run it as the whole program).
COMMANDS = {
    **dict.fromkeys(("submit", "ps", "show", "wait", "logs", "cancel", "nodes"), "jobs"),
    **dict.fromkeys(("hold", "release", "modify", "top", "requeue"), "control"),
    **dict.fromkeys(("lab", "login", "node", "user"), "admin"),
    **dict.fromkeys(("server", "up"), "runtime"),
    **dict.fromkeys(("sim", "trace"), "sim"),
    **dict.fromkeys(("checkpoint", "priority", "usage"), "sharing"),
    **dict.fromkeys(("contact", "idle", "notify"), "monitoring"),
    **dict.fromkeys(("notebook", "shell", "run"), "sessions"),
    **dict.fromkeys(("environment", "dataset", "checkpoints"), "environments"),
}


def modules_for(argv: list[str]) -> tuple[str, ...]:
    """The command modules `nanum ARGV` needs: the one defining its command, or all of them."""
    first = argv[0] if argv else ""
    return (COMMANDS[first],) if first in COMMANDS else COMMAND_MODULES


#: Commands the quick path (`nanum.cli.fast`) may run without click and Typer.
QUICK = frozenset({"submit", "ps", "show", "cancel"})


def main() -> None:
    if sys.argv[1:2] and sys.argv[1] in QUICK:
        from nanum.cli import fast

        if fast.run(sys.argv[1:]):
            return
    from nanum.cli.app import app

    for name in modules_for(sys.argv[1:]):
        importlib.import_module(f"nanum.cli.{name}")
    app()
