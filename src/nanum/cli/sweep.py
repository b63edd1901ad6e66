"""Hyperparameter sweeps: `nanum sweep sweep.toml` runs a grid or a random search as one job array, and
`nanum sweep show ID` lists its trials with their parameters, state and last metrics. docs/sweeps.md is the
user's guide: the file's keys, a worked example (which tests/e2e/test_pipelines.py runs as written) and metrics.

A trial's command is picked by its task index (`_PICK`) from the array's arguments, each trial's values quoted
for the shell (`commands`). Its parameters travel with the array in its `NANUM_SWEEP` variable, so `sweep show`
needs nothing but the array's id; a trial's metrics are read from its output (`NANUM_METRIC name=value` lines,
`parse_metric`).
"""

from __future__ import annotations

import json as jsonlib
import sys
from pathlib import Path
from typing import Annotated, Any

import click
import typer

from nanum.cli.app import app
from nanum.cli.common import Group, JsonOpt, ServerOpt, TokenOpt, UsageProblem, clean_errors, connect, digits
from nanum.server.limits import MAX_ARGS, MAX_COMMAND_BYTES, MAX_ENV_BYTES

METRIC_PREFIX = "NANUM_METRIC "
#: The keys of a sweep file that are options of `nanum submit` (`nanum.cli.jobcmds.submit_options`), and the
#: TOML type each takes: a whole number, text (sizes and durations too: "32G", "4h"), a list of text (a lone
#: text is a list of one), a table of text, a boolean.
SUBMIT_KEYS = {"gpus": int, "nodes": int, "cpus": int, "priority": int, "gpu_model": str, "gpu_mem": str,
               "mem": str, "time": str, "lab": str, "workdir": str, "environment": str, "constraint": list,
               "dataset": list, "env": dict, "no_preempt": bool}
#: The keys of a sweep file that are its own.
SWEEP_KEYS = ("name", "command", "max_running", "metric", "goal", "grid", "random")


class SweepGroup(Group):
    """`nanum sweep FILE` is `nanum sweep run FILE`."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().resolve_command(ctx, args)


sweep_app = typer.Typer(cls=SweepGroup, help="Hyperparameter sweeps: `nanum sweep sweep.toml`, "
                                             "`nanum sweep show ID`.", no_args_is_help=True)
app.add_typer(sweep_app, name="sweep")


def load(path: Path) -> dict[str, Any]:
    import tomllib

    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        raise UsageProblem(f"cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageProblem(f"{path} is not valid TOML: {exc}") from None


def trials(spec: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The parameter sets of a sweep: every combination of [grid], or [random]'s `trials` draws."""
    if ("grid" in spec) == ("random" in spec):
        raise UsageProblem(f"{where}: give either a [grid] or a [random] table of parameters")
    if "grid" in spec:
        import itertools
        import math

        grid = spec["grid"]
        bad = [k for k, v in grid.items() if not isinstance(v, list) or not v]
        if bad or not grid:
            raise UsageProblem(f"{where}: each [grid] parameter needs a list of values, e.g. lr = [0.1, 0.01]")
        sizes = [len(values) for values in grid.values()]
        product = f" ({' x '.join(map(str, sizes))} values)" if len(sizes) > 1 else ""
        _refuse_too_many(math.prod(sizes), where, f"the [grid] makes {math.prod(sizes):,} trials{product}",
                         "fewer values, or split the grid into several sweeps")
        names = list(grid)
        return [dict(zip(names, values, strict=True)) for values in itertools.product(*grid.values())]
    return _random(dict(spec["random"]), where)


def _refuse_too_many(count: int, where: str, what: str, instead: str) -> None:
    """More trials than one job's command carries (`MAX_TRIALS`) are refused before any is made: a grid of twelve
    parameters of ten values each was made in memory, 10^12 trials, until the kernel killed the command."""
    if count > MAX_TRIALS:
        raise UsageProblem(f"{where}: {what}; a sweep runs at most {MAX_TRIALS:,} trials (give {instead})")


def _refuse_too_large(what: str, size: int, most: int, where: str) -> None:
    """The server's bounds on a job's command and environment, said of the sweep that made them."""
    if size > most:
        raise UsageProblem(f"{where}: {what} come to {size:,} bytes, and a job takes at most {most:,}; give fewer "
                           "trials or shorter values")


def _random(table: dict[str, Any], where: str) -> list[dict[str, Any]]:
    import math
    import random

    count, seed = table.pop("trials", None), table.pop("seed", 0)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise UsageProblem(f"{where}: [random] needs trials = N, the number of trials to draw")
    _refuse_too_many(count, where, f"[random] asks for {count:,} trials", "a smaller trials = N, or several sweeps")
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        trial: dict[str, Any] = {}
        for name, dist in table.items():
            if isinstance(dist, list) and dist:
                trial[name] = rng.choice(dist)
            elif isinstance(dist, dict) and {"min", "max"} <= set(dist):
                lo, hi = float(dist["min"]), float(dist["max"])
                if dist.get("log"):
                    trial[name] = float(f"{math.exp(rng.uniform(math.log(lo), math.log(hi))):.6g}")
                elif isinstance(dist["min"], int) and isinstance(dist["max"], int):
                    trial[name] = rng.randint(int(lo), int(hi))
                else:
                    trial[name] = float(f"{rng.uniform(lo, hi):.6g}")
            else:
                raise UsageProblem(f"{where}: [random] parameter {name} needs a list of values or "
                                   "{min = A, max = B} (add log = true for a log scale)")
        out.append(trial)
    return out


def submit_keys(spec: dict[str, Any], where: str) -> dict[str, Any]:
    """The sweep's options of `nanum submit`, as `submit_options` takes them; a key that is neither one of
    those nor the sweep's own, or a value of the wrong type, is refused naming it."""
    unknown = [key for key in spec if key not in SUBMIT_KEYS and key not in SWEEP_KEYS]
    if unknown:
        raise UsageProblem(f"{where}: unknown key {unknown[0]!r}; a sweep takes {', '.join(SWEEP_KEYS)} and the "
                           f"options of nanum submit {', '.join(SUBMIT_KEYS)}")
    out: dict[str, Any] = {}
    for key, kind in SUBMIT_KEYS.items():
        if key not in spec:
            continue
        value = spec[key]
        if kind is list and isinstance(value, str):
            value = [value]
        if kind is str and isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)  # mem = 32768 (MiB), time = 90 (minutes), as on the command line
        if not _fits(value, kind):
            raise UsageProblem(f"{where}: {key} = {value!r} is not {_KINDS[kind]}")
        out[key] = [f"{k}={v}" for k, v in value.items()] if kind is dict else value
    return out


def _fits(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is list:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind is dict:
        return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    return isinstance(value, kind)


_KINDS = {int: "a whole number", str: "text", list: "a list of text", dict: "a table of text, e.g. {SEED = \"1\"}",
          bool: "true or false"}


def commands(template: str, sets: list[dict[str, Any]], where: str) -> list[str]:
    """The template with each trial's values, quoted for the shell."""
    import shlex

    if "\0" in template:
        raise UsageProblem(f"{where}: the command contains a NUL byte; remove it")
    out = []
    for values in sets:
        for name, value in values.items():
            if "\0" in str(value):
                raise UsageProblem(f"{where}: a value of parameter {name} ({str(value)!r}) contains a NUL byte; "
                                   "remove it")
        try:
            out.append(template.format_map({k: shlex.quote(str(v)) for k, v in values.items()}))
        except (KeyError, IndexError, ValueError) as exc:
            raise UsageProblem(f"{where}: the command names {exc} which no parameter gives; write a literal "
                               "brace as {{ or }}") from None
    return out


#: Runs the trial whose index is $NANUM_ARRAY_TASK_ID: its command is that positional argument.
_PICK = 'shift "$NANUM_ARRAY_TASK_ID"; exec /bin/sh -c "$1"'
#: The array's command, before the trials' commands (one argument each).
_PICKER = ["/bin/sh", "-c", _PICK, "nanum-sweep"]
#: The most trials a sweep's array carries: one argument each beside `_PICKER`.
MAX_TRIALS = MAX_ARGS - len(_PICKER)


@sweep_app.command("run")
@clean_errors
def run(
    file: Annotated[Path, typer.Argument(metavar="SWEEP.TOML", show_default=False, help="The sweep to run.")],
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Run a sweep: one array task per trial, each with its parameters in the command."""
    from nanum.cli.jobcmds import submit_options
    from nanum.cli.jobspec import build_request

    spec = load(file)
    if not isinstance(spec.get("command"), str) or not spec["command"].strip():
        raise UsageProblem(f"{file.name}: give the command to run, e.g. command = \"python train.py --lr {{lr}}\"")
    sets = trials(spec, file.name)
    lines = commands(spec["command"], sets, file.name)
    limit = spec.get("max_running")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise UsageProblem(f"{file.name}: max_running is the most trials at once, a whole number such as 4")
    given = submit_keys(spec, file.name)
    sweep = jsonlib.dumps({"params": sets, "metric": spec.get("metric"), "goal": spec.get("goal", "min")},
                          separators=(",", ":"))
    _refuse_too_large(f"the {len(sets):,} trials' commands", sum(len(c.encode()) for c in [*_PICKER, *lines]),
                      MAX_COMMAND_BYTES, file.name)
    _refuse_too_large(f"the {len(sets):,} trials' parameters (NANUM_SWEEP)", len(sweep.encode()) + len("NANUM_SWEEP"),
                      MAX_ENV_BYTES, file.name)
    try:  # the options' own checks name the command line's flag: say which file it is in
        options = submit_options(**given)
        options.update(name=spec.get("name") or file.stem,
                       array=f"0-{len(sets) - 1}" + (f"%{limit}" if limit else ""),
                       env={**options.get("env", {}), "NANUM_SWEEP": sweep})
        body = build_request([*_PICKER, *lines], options, Path.cwd())
    except UsageProblem as exc:
        raise UsageProblem(f"{file.name}: {exc}") from None
    with connect(server, token) as client:
        job = client.submit(body.pop("command"), **body)
    if json:
        from nanum.cli.base import print_json

        print_json(job)
        return
    kind = "grid" if "grid" in spec else "random search"
    print(f"Submitted sweep {job['array_id']}: {len(sets)} trials ({kind} over {', '.join(sets[0])}); "
          f"`nanum sweep show {job['array_id']}` lists them")


@sweep_app.command("show")
@clean_errors
def show(
    sweep_id: Annotated[int, typer.Argument(metavar="ID", show_default=False, parser=digits,
                                            help="The sweep's id (its array's, as `nanum ps` shows it).")],
    sort: Annotated[str | None, typer.Option("--sort", metavar="METRIC", help=(
        "Sort by this metric (default: the sweep's metric, else the first reported)."))] = None,
    highest_first: Annotated[bool, typer.Option("--max", help="Highest first (default: the sweep's goal).")] = False,
    csv: Annotated[bool, typer.Option("--csv", help="Comma-separated values, with a header line.")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """A sweep's trials: parameters, state and the last value of each metric, best first."""
    with connect(server, token) as client:
        tasks = client.array_tasks(sweep_id)
        if not tasks:
            raise UsageProblem(f"job {sweep_id} is not a sweep (no array tasks); `nanum ps` lists the sweeps")
        found = jsonlib.loads((tasks[0].get("env") or {}).get("NANUM_SWEEP") or "null")
        if found is None:
            raise UsageProblem(f"array {sweep_id} was not started by `nanum sweep`, or its environment is hidden "
                               "from you (only its owner and admins see it)")
        metrics = [_metrics(client, t["id"]) for t in tasks]
    params: list[dict[str, Any]] = found["params"]
    names = list(params[0]) if params else []
    metric_names = list(dict.fromkeys(m for ms in metrics for m in ms))
    key = sort or found.get("metric") or (metric_names[0] if metric_names else None)
    highest = highest_first or found.get("goal") == "max"
    rows = []
    for task, values in zip(tasks, metrics, strict=True):
        index = task["array_task"] or 0
        trial = params[index] if index < len(params) else {}
        rows.append((task, trial, values))
    if key is not None:
        rows.sort(key=lambda r: (key not in r[2], -r[2][key] if highest and key in r[2] else r[2].get(key, 0.0)))
    header = ["TRIAL", "ID", "STATE", *names, *metric_names]
    table = [(str(t["array_task"]), f"{sweep_id}_{t['array_task']}", t["state"],
              *(str(trial.get(n, "")) for n in names), *(_number(values.get(m)) for m in metric_names))
             for t, trial, values in rows]
    if csv:
        import csv as csvlib

        writer = csvlib.writer(sys.stdout, lineterminator="\n")
        writer.writerow([h.lower() for h in header])
        writer.writerows(table)
        return
    from nanum.cli.views import print_table

    caption = f"sorted by {key}, {'highest' if highest else 'lowest'} first" if key else "no metrics reported yet"
    print_table(header, table, caption=caption)


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def _metrics(client: Any, job_id: int) -> dict[str, float]:
    """The last value of each `NANUM_METRIC name=value` line in a job's output."""
    found: dict[str, float] = {}
    offset, rest = 0, ""
    while True:
        chunk = client.logs(job_id, offset)
        for line in (rest + chunk.text).split("\n")[:-1] if chunk.text else []:
            parse_metric(line, found)
        rest = (rest + chunk.text).rsplit("\n", 1)[-1] if chunk.text else rest
        if not chunk.text or chunk.offset <= offset:
            break
        offset = chunk.offset
    parse_metric(rest, found)
    return found


def parse_metric(line: str, into: dict[str, float]) -> None:
    """`NANUM_METRIC loss=0.31` (several `name=value` pairs may follow one prefix) into `into`."""
    if not line.startswith(METRIC_PREFIX):
        return
    for pair in line[len(METRIC_PREFIX):].split():
        name, eq, value = pair.partition("=")
        if eq:
            try:
                into[name] = float(value)
            except ValueError:
                continue
