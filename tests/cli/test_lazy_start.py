"""`nanum CMD` loads only the module that defines CMD; the table saying which one that is stays true."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

from nanum.cli import COMMAND_MODULES, COMMANDS, modules_for


def test_the_table_names_each_commands_module_and_every_module_of_two_or_more_commands() -> None:
    from nanum.cli.app import app

    for module in COMMAND_MODULES:
        importlib.import_module(f"nanum.cli.{module}")
    defined: dict[str, str] = {}
    for c in app.registered_commands:
        defined[c.name or c.callback.__name__.replace("_", "-")] = c.callback.__module__  # type: ignore[union-attr]
    for g in app.registered_groups:
        sub = g.typer_instance
        first = sub.registered_commands[0].callback if sub.registered_commands else sub.registered_callback.callback
        defined[str(g.name or sub.info.name)] = first.__module__  # type: ignore[union-attr]
    by_module: dict[str, list[str]] = {}
    for name, module in defined.items():
        by_module.setdefault(module.removeprefix("nanum.cli."), []).append(name)
    expected = {name: module for module, names in by_module.items() if len(names) >= 2 for name in names}
    assert expected == COMMANDS


def test_a_known_command_loads_its_module_alone_and_help_loads_all() -> None:
    assert modules_for(["ps", "--all"]) == ("jobs",)
    assert modules_for(["hold", "12"]) == ("control",)
    assert modules_for(["--help"]) == COMMAND_MODULES
    assert modules_for(["agnet"]) == COMMAND_MODULES
    code = ("import sys; sys.argv = ['nanum', 'ps', '--help']\n"
            "from nanum.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "import json; print(json.dumps(sorted(m for m in sys.modules if m.startswith('nanum.cli.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out.strip().splitlines()[-1])
    assert "nanum.cli.jobs" in loaded and not {"nanum.cli.admin", "nanum.cli.sim", "nanum.cli.runtime"} & set(loaded)
