"""`nanum CMD` loads only the module that defines CMD; the table saying which one that is stays true."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

from nanum.cli import COMMAND_MODULES, COMMANDS, modules_for


def test_the_table_names_each_commands_module_and_every_module_of_two_or_more_commands() -> None:
    from nanum.cli.app import app

    found: dict[str, str] = {}
    for module in COMMAND_MODULES:
        before = len(app.registered_commands), len(app.registered_groups)
        importlib.import_module(f"nanum.cli.{module}")
        commands = app.registered_commands[before[0]:]
        groups = app.registered_groups[before[1]:]
        names = [c.name or c.callback.__name__.replace("_", "-") for c in commands]  # type: ignore[union-attr]
        names += [str(g.name or g.typer_instance.info.name) for g in groups]
        if len(names) >= 2:
            found.update(dict.fromkeys(names, module))
    assert found == COMMANDS


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
