"""Turning `nanum submit` flags and `#NANUM` script headers into the body of `POST /jobs`.

A batch script may carry its own options, like `#SBATCH` lines: `#NANUM` lines in the comment block at the
top of the script (after the `#!` line, among other comments and blank lines) are read as if given on the
command line; flags actually given on the command line win. Example:

    #!/bin/bash
    #NANUM --gpus 2 --time 4h
    #NANUM --env WANDB_MODE=offline
    python train.py

Values: `--mem` takes 512M, 32G, 1.5T (or a bare number of MiB) and becomes MiB; `--time` takes the forms
sbatch knows (90 = 90 minutes, 30:00, 1:30:00, 2-00:00:00, 2-12) or a unit suffix (90s, 30m, 4h, 2d) and
becomes seconds. A bad value raises `UsageProblem` naming the option, the value and an example that works.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nanum import units
from nanum.cli.base import UsageProblem
from nanum.jobfields import SubmitFields, bounds
from nanum.server.limits import MAX_CPUS, MAX_GPUS, MAX_MEMORY_MB, MAX_NODES, MAX_TIME_LIMIT_S
from nanum.units import whole_number

if TYPE_CHECKING:
    from os import PathLike

    StrPath = str | PathLike[str]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_mem(text: str, option: str = "--mem") -> int:
    """'32G' -> 32768 (MiB). A bare number is MiB (`nanum.units`)."""
    try:
        return units.parse_mem(text, option)
    except ValueError as exc:
        raise UsageProblem(str(exc)) from None


def parse_time(text: str, option: str = "--time") -> int:
    """'4h' -> 14400, '1:30:00' -> 5400, '2-00:00:00' -> 172800, '90' -> 5400 (minutes, as in sbatch)."""
    try:
        return units.parse_time(text, option)
    except ValueError as exc:
        raise UsageProblem(str(exc)) from None


def parse_env(items: list[str], option: str = "--env") -> dict[str, str]:
    """['K=V', 'HOME'] -> {'K': 'V', 'HOME': <the current value>}. A bare name copies this shell's value."""
    env: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not _ENV_NAME.match(name):
            raise UsageProblem(f"{option}: {item!r} is not NAME=VALUE with a valid name, e.g. SEED=1")
        if not sep:
            if name not in os.environ:
                raise UsageProblem(f"{option}: {name} is not set here; give {name}=VALUE")
            value = os.environ[name]
        env[name] = value
    return env


#: Every option of a submission: the fields of `POST /jobs` beside its command, and the files output goes to.
OPTIONS = frozenset(SubmitFields.__annotations__) | {"output", "error"}


class SubmitOptions(dict[str, Any]):
    """Options of one submission, by name: any field of `POST /jobs` (`nanum.jobfields.SubmitFields`), and
    `output` and `error`, the files its output and errors go to. Only options given are kept: one that is None
    is left to script headers, and then to the server. A name that is no option is a TypeError."""

    def __init__(self, **values: Any) -> None:
        unknown = sorted(set(values) - OPTIONS)
        if unknown:
            raise TypeError(f"not an option of a submission: {', '.join(unknown)}")
        super().__init__((key, value) for key, value in values.items() if value is not None)


def merged(top: SubmitOptions, base: SubmitOptions) -> SubmitOptions:
    """`top`'s options where given, else `base`'s; environment variables are merged, `top`'s winning."""
    return SubmitOptions(**{**base, **top, "env": {**base.get("env", {}), **top.get("env", {})}})


def _int(option: str, lo: int, hi: int | None = None) -> Any:
    def parse(text: str) -> int:
        value = whole_number(text)
        if value is None:
            raise UsageProblem(f"{option}: {text!r} is not a whole number")
        if value < lo or (hi is not None and value > hi):
            bounds = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
            raise UsageProblem(f"{option}: {value} must be {bounds}")
        return value

    return parse


_MODELS = re.compile(r"^[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$")


def parse_models(text: str) -> str:
    """'A100, H100' -> 'A100,H100': one GPU model, or several of which any will do."""
    models = ",".join(m.strip() for m in text.split(","))
    if len(models) > 64:
        raise UsageProblem(f"--gpu-model: {units.quoted(text)} is too long; give at most 64 characters")
    if not _MODELS.match(models):
        raise UsageProblem(f"--gpu-model: cannot read {text!r}; give a model such as A100, or several: A100,H100")
    return models


def parse_label(text: str, option: str = "--constraint") -> str:
    """'net=ib' -> 'net=ib': a node label, as a job asks for it (`--constraint`) or a node is given it (`--label`)."""
    try:
        return units.parse_label(text, option)
    except ValueError as exc:
        raise UsageProblem(str(exc)) from None


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def parse_name(text: str, option: str) -> str:
    """The name of an environment or dataset, as `nanum environment list` and `nanum dataset list` show them."""
    if not _NAME.match(text.strip()):
        raise UsageProblem(f"{option}: {text!r} is not a name; give one such as torch-2.4 (letters, digits, . _ -)")
    return text.strip()


_JOB_REF = re.compile(r"^\d{1,9}(_\d{1,7})?$")


def parse_job_refs(text: str, option: str = "--after") -> list[str]:
    """'12,13_4' (or '12:13_4') -> ['12', '13_4']: jobs, arrays (12) or array tasks (12_4)."""
    refs = [r for r in re.split(r"[,:]", text.strip()) if r]
    bad = next((r for r in refs if not _JOB_REF.match(r)), None)
    if not refs or bad is not None:
        raise UsageProblem(f"{option}: {text!r} is not a list of job IDs; give e.g. 12 or 12,13 or 12_4")
    return refs


def _array(text: str) -> str:
    if not re.match(r"^[0-9,:%-]+$", text):
        raise UsageProblem(f"--array: cannot read {text!r}; give e.g. 0-99, 0-99%8, 1,3,5-9 or 0-20:2")
    return text


# option -> (field, parser); parsers take the text and raise UsageProblem. Every option `nanum submit` takes.
HEADER_OPTIONS: dict[str, tuple[str, Any]] = {
    "--gpus": ("gpus", _int("--gpus", 0)),
    "--nodes": ("nodes", _int("--nodes", 1)),
    "--gpu-model": ("gpu_model", parse_models),
    "--gpu-mem": ("gpu_memory_mb", lambda t: parse_mem(t, "--gpu-mem")),
    "--cpus": ("cpus", _int("--cpus", 0)),
    "--mem": ("memory_mb", parse_mem),
    "--time": ("time_limit_s", parse_time),
    "--priority": ("priority", _int("--priority", *bounds("priority"))),
    "--tier": ("tier", _int("--tier", *bounds("tier"))),
    "--lab": ("lab", str),
    "--name": ("name", str),
    "--workdir": ("workdir", str),
    "--array": ("array", _array),
    "--after": ("after", lambda t: parse_job_refs(t, "--after")),
    "--after-ok": ("after_ok", lambda t: parse_job_refs(t, "--after-ok")),
    "--after-failed": ("after_failed", lambda t: parse_job_refs(t, "--after-failed")),
    "--after-any": ("after_any", lambda t: parse_job_refs(t, "--after-any")),
    "--retries": ("retries", _int("--retries", *bounds("retries"))),
    "--output": ("output", str),
    "--error": ("error", str),
    "--environment": ("environment", lambda t: parse_name(t, "--environment")),
}
#: Short forms, as `nanum submit --help` lists them.
SHORT_OPTIONS = {"-g": "--gpus", "-N": "--nodes", "-c": "--cpus", "-t": "--time", "-J": "--name",
                 "-D": "--workdir", "-e": "--env", "-o": "--output", "-E": "--environment", "-H": "--hold"}
FLAGS = {"--no-preempt": ("preemptible", False), "--requeue": ("requeue", True), "--no-requeue": ("requeue", False),
         "--keep-if-unmet": ("keep_if_unmet", True), "--hold": ("hold", True),
         "--torchrun": ("torchrun", True)}
#: Options that may be given more than once, each adding a value.
REPEATED: dict[str, tuple[str, Callable[[str], str]]] = {
    "--constraint": ("constraints", parse_label),
    "--dataset": ("datasets", lambda t: parse_name(t, "--dataset")),
}


def parse_header_args(args: list[str], where: str) -> SubmitOptions:
    """Options from one script's `#NANUM` words, e.g. ['--gpus', '2', '--env=K=V', '-J', 'run', '--no-preempt']."""
    values: dict[str, Any] = {}
    env: list[str] = []
    i = 0
    while i < len(args):
        opt, eq, inline = args[i].partition("=") if args[i].startswith("--") else (args[i], "", "")
        opt = SHORT_OPTIONS.get(opt, opt)
        if opt in FLAGS and not eq:
            name, value = FLAGS[opt]
            values[name] = value
            i += 1
            continue
        if opt not in HEADER_OPTIONS and opt not in REPEATED and opt != "--env":
            raise UsageProblem(f"{where}: unknown option {opt!r} in a #NANUM line; `nanum submit --help` lists them")
        if not eq:
            if i + 1 >= len(args):
                raise UsageProblem(f"{where}: {opt} needs a value")
            inline, i = args[i + 1], i + 1
        i += 1
        try:
            if opt == "--env":
                env.append(inline)
            elif opt in REPEATED:
                name, parse = REPEATED[opt]
                values[name] = [*values.get(name, ()), parse(inline)]
            else:
                name, parse = HEADER_OPTIONS[opt]
                values[name] = parse(inline)
        except UsageProblem as exc:
            raise UsageProblem(f"{where}: {exc}") from None
    try:
        return SubmitOptions(env=parse_env(env), **values)
    except UsageProblem as exc:
        raise UsageProblem(f"{where}: {exc}") from None


def read_script_header(path: StrPath) -> SubmitOptions:
    """The `#NANUM` (and `#SBATCH`, `#BSUB`) options at the top of a script."""
    return read_script(path)[0]


def read_script(path: StrPath) -> tuple[SubmitOptions, list[str]]:
    """The options in a script's header and what was made of each `#SBATCH` and `#BSUB` line (used as what,
    or ignored and why). The header ends at the first line that is not a comment or blank. `#NANUM` lines win
    over `#SBATCH` and `#BSUB` lines; a bad `#NANUM` line is an error, a foreign line nanum cannot follow is
    ignored with a note."""
    from nanum.cli.foreign import translate

    native, foreign = SubmitOptions(), SubmitOptions()
    notes: list[str] = []
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise UsageProblem(f"cannot read the script {os.fspath(path)}: {exc.strerror}") from None
    name = os.path.basename(path)
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        where = f"{name} line {number}"
        if stripped.startswith("#NANUM"):
            native = merged(parse_header_args(_words(stripped[len("#NANUM"):], where), where), native)
        elif stripped.startswith(("#SBATCH", "#BSUB")):
            kind = "#SBATCH" if stripped.startswith("#SBATCH") else "#BSUB"
            words, note = translate(kind, _words(stripped[len(kind):], where))
            notes.append(f"{where}: {stripped}: {note}")
            if words:
                foreign = merged(parse_header_args(words, where), foreign)
        elif stripped and not stripped.startswith("#"):
            break
    return merged(native, foreign), notes


def _words(text: str, where: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:
        raise UsageProblem(f"{where}: {exc}") from None


def script_command(script: StrPath, args: list[str]) -> list[str]:
    """How to run a script: itself if executable, else through its `#!` interpreter, else through bash."""
    path = os.path.realpath(script)
    if os.access(path, os.X_OK):
        return [path, *args]
    with open(path, "rb") as f:
        first = f.readline(256).decode(errors="replace")
    if first.startswith("#!") and (interpreter := shlex.split(first[2:].strip())):
        return [*interpreter, path, *args]
    return ["bash", path, *args]


def build_request(command: list[str], cli: SubmitOptions, cwd: StrPath, notes: list[str] | None = None, *,
                  script: bool = True) -> dict[str, Any]:
    """The `POST /jobs` body for `command` (a script path, where `script`, or an argv) with the command line's
    options. What was made of a script's `#SBATCH` and `#BSUB` lines is added to `notes`."""
    if not command:
        raise UsageProblem("nothing to run; give a command after `--` or a script, e.g. "
                           "`nanum submit --gpus 1 -- python train.py`")
    options = cli
    cwd = os.fspath(cwd)
    default_name = os.path.basename(command[0].rstrip("/")) or command[0]
    first = command[0] if os.path.isabs(command[0]) else os.path.join(cwd, command[0])
    if script and os.path.isfile(first) and ("/" in command[0] or not _on_path(command[0])):
        header, found = read_script(first)
        options = merged(cli, header)
        (notes if notes is not None else []).extend(found)
        # torchrun starts the script itself (with Python), on every node
        command = ([os.path.realpath(first), *command[1:]] if options.get("torchrun")
                   else script_command(first, command[1:]))
    for key, option, default in _EMPTY_REFUSED:
        if options.get(key) == "":
            raise UsageProblem(f"{option} is empty; give one, or leave the option out for {default}")
    workdir = options.get("workdir") or cwd
    body: dict[str, Any] = {
        "command": command,
        "name": options.get("name") or default_name,
        "workdir": _clean(workdir) if os.path.isabs(workdir) else os.path.realpath(os.path.join(cwd, workdir)),
        "env": options.get("env", {}),
    }
    body.update((key, value) for key, value in options.items() if key not in _NOT_AS_GIVEN and value is not None)
    if options.get("output") or options.get("error"):
        body["command"] = redirected(body["command"], options.get("output"), options.get("error"), body["name"])
    check_bounds(body)
    return body


#: Options that name something, each with what leaving it out gives: given as "", the user meant something else.
_EMPTY_REFUSED = (("name", "--name", "the command's name"), ("lab", "--lab", "your default lab"),
                  ("workdir", "--workdir", "the current directory"))

#: Options `build_request` makes fields of itself; every other one given is sent as it is.
_NOT_AS_GIVEN = frozenset({"name", "workdir", "env", "output", "error"})

#: Runs "$@" with stdout to $1 and stderr to $2 (to $1 when $2 is empty or the same), after expanding %j (the
#: job id), %A (the array's id, else the job's), %a (the task index, else 0) and %% in both.
_REDIRECT = (
    'x() { printf %s "$1" | sed -e "s/%A/${NANUM_ARRAY_JOB_ID:-$NANUM_JOB_ID}/g" '
    '-e "s/%a/${NANUM_ARRAY_TASK_ID:-0}/g" -e "s/%j/$NANUM_JOB_ID/g" -e "s/%%/%/g"; }; '
    'o=$(x "$1"); e=$(x "$2"); shift 2; '
    'if [ -n "$o" ]; then exec >"$o"; fi; '
    'if [ -n "$e" ] && [ "$e" != "$o" ]; then exec 2>"$e"; elif [ -n "$o" ]; then exec 2>&1; fi; '
    'exec "$@"'
)


def redirected(command: list[str], output: str | None, error: str | None, name: str) -> list[str]:
    """`command` with its output (and errors) written to files named by Slurm-style patterns: %j the job id,
    %A the array's id, %a the task index, %x the job name. Relative names are in the working directory."""
    def named(pattern: str | None) -> str:
        return (pattern or "").replace("%x", name.replace("%", "%%"))

    return ["/bin/sh", "-c", _REDIRECT, "nanum-output", named(output), named(error), *command]

# field -> (option, least, most, the most in words): the server's limits (docs/api.md), checked before sending.
_BOUNDS: dict[str, tuple[str, int, int, str]] = {
    "gpus": ("--gpus", 0, MAX_GPUS, f"{MAX_GPUS}"),
    "nodes": ("--nodes", 1, MAX_NODES, f"{MAX_NODES}"),
    "cpus": ("--cpus", 0, MAX_CPUS, f"{MAX_CPUS:,}"),
    "memory_mb": ("--mem", 1, MAX_MEMORY_MB, f"{MAX_MEMORY_MB >> 20}T"),
    "gpu_memory_mb": ("--gpu-mem", 0, MAX_MEMORY_MB, f"{MAX_MEMORY_MB >> 20}T"),
    "time_limit_s": ("--time", 1, MAX_TIME_LIMIT_S, f"{MAX_TIME_LIMIT_S // 86400} days"),
}


def check_bounds(body: dict[str, Any]) -> None:
    """Refuse a submitted or modified field past the server's limits in the words of its option (`--mem: at most
    64T ...`), not in the API's (`invalid memory_mb: ...`)."""
    for key, (option, least, most, words) in _BOUNDS.items():
        value = body.get(key)
        if value is not None and value > most:
            raise UsageProblem(f"{option}: at most {words} may be asked for; give less")
        if value is not None and value < least:
            raise UsageProblem(f"{option}: {value} is below {least}; give {least} or more")


def _clean(path: str) -> str:
    """An absolute path without repeated or trailing slashes, as `pathlib` writes it ('..' stays)."""
    return "/" + "/".join(p for p in path.split("/") if p and p != ".")


def _on_path(name: str) -> bool:
    import shutil

    return shutil.which(name) is not None
