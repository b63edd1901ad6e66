"""The quick path for the commands people run in shell loops: `nanum submit`, `ps`, `show` and `cancel` parsed
without importing click or Typer (which cost more than the rest of the command together).

The Typer commands (`nanum.cli.jobs`) stay the definition: `SPEC` is what `spec_from_app()` reads from them
(options, their kinds, the positional arguments), and a test keeps the two equal. `run` follows click's rules
for what it accepts (`--opt VALUE`, `--opt=VALUE`, `-o VALUE`, `-oVALUE`, flags, repeated options, `--`) and
returns False for anything else (`--help`, an unknown option, a missing or bad value, a missing argument), so
that Typer handles it as it always did, help and error messages included.
"""

from __future__ import annotations

from typing import Any

from nanum.units import whole_number

#: command -> {"options": {flag: [parameter, kind, multiple]}, "args": [[parameter, nargs, required]],
#: "interspersed": options may follow arguments}. kind: "flag", "int" or "str". Regenerate with
#: `python -c "from nanum.cli.fast import spec_from_app; print(spec_from_app())"` when the commands change.
SPEC: dict[str, dict[str, Any]] = {
    "submit": {
        "options": {
            "--gpus": ["gpus", "int", False], "-g": ["gpus", "int", False], "--nodes": ["nodes", "int", False],
            "-N": ["nodes", "int", False], "--gpu-model": ["gpu_model", "str", False],
            "--gpu-mem": ["gpu_mem", "str", False], "--constraint": ["constraint", "str", True],
            "--torchrun": ["torchrun", "flag", False],
            "--cpus": ["cpus", "int", False], "-c": ["cpus", "int", False], "--mem": ["mem", "str", False],
            "--time": ["time", "str", False], "-t": ["time", "str", False], "--priority": ["priority", "int", False],
            "--tier": ["tier", "int", False],
            "--lab": ["lab", "str", False], "--name": ["name", "str", False], "-J": ["name", "str", False],
            "--workdir": ["workdir", "str", False], "-D": ["workdir", "str", False], "--env": ["env", "str", True],
            "-e": ["env", "str", True], "--no-preempt": ["no_preempt", "flag", False],
            "--hold": ["hold", "flag", False], "-H": ["hold", "flag", False],
            "--requeue": ["requeue", "flag", False], "--no-requeue": ["no_requeue", "flag", False],
            "--array": ["array", "str", False], "--after": ["after", "str", True],
            "--after-ok": ["after_ok", "str", True], "--after-failed": ["after_failed", "str", True],
            "--after-any": ["after_any", "str", True], "--keep-if-unmet": ["keep_if_unmet", "flag", False],
            "--retries": ["retries", "int", False], "--output": ["output", "str", False],
            "-o": ["output", "str", False], "--error": ["error", "str", False],
            "--environment": ["environment", "str", False], "-E": ["environment", "str", False],
            "--dataset": ["dataset", "str", True], "--json": ["json", "flag", False],
            "--server": ["server", "str", False], "--token": ["token", "str", False],
        },
        "args": [["command", -1, False]],
        "interspersed": False,
    },
    "ps": {
        "options": {
            "--all": ["all", "flag", False], "-a": ["all", "flag", False], "--user": ["user", "str", False],
            "-u": ["user", "str", False], "--lab": ["lab", "str", False], "--state": ["state", "str", True],
            "-s": ["state", "str", True], "--expand": ["expand", "flag", False], "--format": ["format", "str", False],
            "-o": ["format", "str", False], "--fields": ["fields", "str", False],
            "--noheader": ["noheader", "flag", False], "-h": ["noheader", "flag", False],
            "--limit": ["limit", "int", False], "--json": ["json", "flag", False],
            "--server": ["server", "str", False], "--token": ["token", "str", False],
        },
        "args": [],
        "interspersed": True,
    },
    "show": {
        "options": {
            "--json": ["json", "flag", False], "--server": ["server", "str", False],
            "--token": ["token", "str", False],
        },
        "args": [["job_id", 1, True]],
        "interspersed": True,
    },
    "cancel": {
        "options": {
            "--server": ["server", "str", False], "--token": ["token", "str", False],
        },
        "args": [["job_ids", -1, True]],
        "interspersed": True,
    },
}


def run(argv: list[str]) -> bool:
    """Run `nanum ARGV` if the quick path can parse it (it exits as the command does); False otherwise."""
    spec = SPEC.get(argv[0]) if argv else None
    parsed = parse(spec, argv[1:]) if spec is not None else None
    if parsed is None:
        return False
    from nanum.cli import jobcmds

    getattr(jobcmds, argv[0])(**parsed)
    return True


def parse(spec: dict[str, Any], args: list[str]) -> dict[str, Any] | None:
    """The keyword arguments for the command's function, or None where click should decide."""
    options: dict[str, list[Any]] = spec["options"]
    values: dict[str, Any] = {}
    positional: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or (positional and not spec["interspersed"]):
            positional += args[i + 1:] if arg == "--" else args[i:]
            break
        if arg.startswith("--"):
            flag, eq, value = arg.partition("=")
            attached: str | None = value if eq else None
        elif arg.startswith("-") and len(arg) > 1:
            flag, attached = arg[:2], arg[2:] or None
        else:
            positional.append(arg)
            i += 1
            continue
        if flag not in options:
            return None
        name, kind, multiple = options[flag]
        if kind == "flag":
            if attached is not None:
                return None
            values[name] = True
            i += 1
            continue
        if attached is None:
            if i + 1 >= len(args):
                return None
            attached, i = args[i + 1], i + 1
        i += 1
        if kind == "int":
            converted: Any = whole_number(attached)
            if converted is None:  # the full parser says what is wrong with it
                return None
        else:
            converted = attached
        if multiple:
            values.setdefault(name, []).append(converted)
        else:
            values[name] = converted
    return _arguments(spec["args"], positional, values)


def _arguments(wanted: list[list[Any]], positional: list[str], values: dict[str, Any]) -> dict[str, Any] | None:
    for name, nargs, required in wanted:
        if nargs == -1:
            if required and not positional:
                return None
            values[name] = list(positional) or None
            positional = []
        else:
            if len(positional) < nargs:
                return None
            values[name] = positional[0] if nargs == 1 else positional[:nargs]
            positional = positional[nargs:]
    return None if positional else values


def spec_from_app() -> dict[str, dict[str, Any]]:
    """What `SPEC` must be: read from the Typer commands themselves."""
    import click
    import typer.main

    from nanum.cli import jobs  # noqa: F401 - registers the commands
    from nanum.cli.app import app

    group = typer.main.get_command(app)
    out: dict[str, dict[str, Any]] = {}
    for name in ("submit", "ps", "show", "cancel"):
        command = group.commands[name]  # type: ignore[attr-defined]
        options: dict[str, list[Any]] = {}
        args: list[list[Any]] = []
        for p in command.params:
            if isinstance(p, click.Option):
                kind = "flag" if p.is_flag else "int" if isinstance(p.type, click.types.IntParamType) else "str"
                for flag in (*p.opts, *p.secondary_opts):
                    options[flag] = [p.name, kind, p.multiple]
            else:
                args.append([p.name, p.nargs, p.required])
        interspersed = command.context_settings.get("allow_interspersed_args", True)
        out[name] = {"options": options, "args": args, "interspersed": interspersed}
    return out
