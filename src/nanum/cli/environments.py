"""`nanum environment add|list|show|remove`, `nanum dataset add|list|remove` and `nanum checkpoints ID`:
where jobs run (`nanum submit -E NAME`), what they read (`--dataset NAME`) and what they saved."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from nanum.cli.app import app
from nanum.cli.base import UsageProblem
from nanum.cli.common import (
    Command,
    Group,
    JobIdArg,
    JsonOpt,
    ServerOpt,
    TokenOpt,
    clean_errors,
    connect,
    print_json,
)

_Opt = typer.Option
env_app = typer.Typer(cls=Group, help="Environments jobs run in: container images, Python environments, setup "
                      "lines (`nanum submit -E NAME`).", no_args_is_help=True)
data_app = typer.Typer(cls=Group, help="Datasets jobs read, by name (`nanum submit --dataset NAME`).",
                       no_args_is_help=True)
app.add_typer(env_app, name="environment")
app.add_typer(data_app, name="dataset")

NameArg = Annotated[str, typer.Argument(metavar="NAME", show_default=False)]
LabOpt = Annotated[str | None, _Opt("--lab", metavar="LAB", help=(
    "The lab whose members may use it (default: everyone for an admin, else your default lab)."))]
DescriptionOpt = Annotated[str | None, _Opt("--description", "-d", metavar="TEXT", help="What it is for.")]
#: The keys an environment file (TOML) may have.
FILE_KEYS = ("name", "image", "runtime", "python", "setup", "description", "lab")


@env_app.command("add", cls=Command)
@clean_errors
def environment_add(
    name: Annotated[str | None, typer.Argument(metavar="[NAME]", show_default=False,
                                               help="Its name (or the file's `name`).")] = None,
    image: Annotated[str | None, _Opt("--image", metavar="IMAGE", help=(
        "A container image on the nodes, e.g. localhost/torch:2.4."))] = None,
    runtime: Annotated[str | None, _Opt("--runtime", metavar="R", help=(
        "The image's runtime: podman or docker (default: whichever the node has)."))] = None,
    python: Annotated[str | None, _Opt("--python", metavar="DIR", help=(
        "A venv or conda prefix on the nodes: its bin/ goes first on PATH."))] = None,
    setup: Annotated[str | None, _Opt("--setup", metavar="LINE", help=(
        "A shell line run before the job's command, e.g. 'module load cuda/12.4'."))] = None,
    description: DescriptionOpt = None,
    lab: LabOpt = None,
    file: Annotated[Path | None, _Opt("--file", "-f", metavar="FILE", help=(
        "Read it from a TOML file (examples/environments/); options given here win."))] = None,
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Add an environment for your lab (or for everyone, as an admin)."""
    fields = _read_file(file) if file is not None else {}
    given = {"name": name, "image": image, "runtime": runtime, "python": python, "setup": setup,
             "description": description, "lab": lab}
    fields.update({k: v for k, v in given.items() if v is not None})
    if not fields.get("name"):
        raise UsageProblem("give the environment a name: `nanum environment add NAME --image IMAGE`")
    with connect(server, token) as client:
        added = client.add_environment(fields.pop("name"), **fields)
    if json:
        print_json(added)
    else:
        print(f"Added environment {added['name']} ({_what(added)}) for {_scope(added)}")


@env_app.command("list", cls=Command)
@clean_errors
def environment_list(json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """The environments you may use: name, what it is, who may use it, owner, uses, description."""
    from nanum.cli.views import print_table

    with connect(server, token) as client:
        found = client.environments()
    if json:
        print_json(found)
        return
    rows = [(e["name"], _what(e), _scope(e), e["owner"], str(e["uses"]), e["description"]) for e in found]
    print_table(("NAME", "ENVIRONMENT", "FOR", "OWNER", "USES", "DESCRIPTION"), rows,
                None if rows else "No environments yet: `nanum environment add NAME --image IMAGE` adds one.",
                wide="DESCRIPTION")


@env_app.command("show", cls=Command)
@clean_errors
def environment_show(name: NameArg, json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Everything about one environment."""
    with connect(server, token) as client:
        found = client.environment(name)
    if json:
        print_json(found)
        return
    from nanum.cli.views import printable

    for key in ("name", "image", "runtime", "python", "setup", "description", "owner"):
        if found.get(key):
            print(f"{key + ':':<13}{printable(str(found[key]))}")
    print(f"{'for:':<13}{_scope(found)}\n{'uses:':<13}{found['uses']}\n{'created:':<13}{found['created']}")


@env_app.command("remove", cls=Command)
@clean_errors
def environment_remove(name: NameArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Remove an environment (its owner, a manager of its lab, an admin); queued jobs keep what it was."""
    with connect(server, token) as client:
        client.remove_environment(name)
    print(f"Removed environment {name}")


@data_app.command("add", cls=Command)
@clean_errors
def dataset_add(
    name: NameArg,
    path: Annotated[str, typer.Argument(metavar="PATH", show_default=False,
                                        help="Where it is on the nodes, e.g. /data/imagenet.")],
    description: DescriptionOpt = None,
    lab: Annotated[str | None, _Opt("--lab", metavar="LAB", help=(
        "Only this lab may use it (its managers may add it); default: everyone (admins only)."))] = None,
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Name a dataset on the nodes; jobs read it with `--dataset NAME` (read-only in containers)."""
    with connect(server, token) as client:
        added = client.add_dataset(name, path, description=description, lab=lab)
    if json:
        print_json(added)
    else:
        print(f"Added dataset {added['name']} ({added['path']}, ${added['variable']} in jobs) for {_scope(added)}")


@data_app.command("list", cls=Command)
@clean_errors
def dataset_list(json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """The datasets you may use."""
    from nanum.cli.views import print_table

    with connect(server, token) as client:
        found = client.datasets()
    if json:
        print_json(found)
        return
    rows = [(d["name"], d["path"], _scope(d), str(d["uses"]), d["description"]) for d in found]
    print_table(("NAME", "PATH", "FOR", "USES", "DESCRIPTION"), rows,
                None if rows else "No datasets yet: an admin adds one with `nanum dataset add NAME PATH`.",
                wide="DESCRIPTION")


@data_app.command("remove", cls=Command)
@clean_errors
def dataset_remove(name: NameArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Remove a dataset's name (its files stay where they are)."""
    with connect(server, token) as client:
        client.remove_dataset(name)
    print(f"Removed dataset {name}")


@app.command(cls=Command)
@clean_errors
def checkpoints(
    job_id: JobIdArg,
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """The files a job saved in its checkpoint directory, with sizes and times."""
    from nanum.cli.jobcmds import resolve
    from nanum.cli.views import print_table

    with connect(server, token) as client:
        found = client.checkpoints(resolve(client, job_id)[0])
    if json:
        print_json(found)
        return
    if not found["files"]:
        state = "is empty" if found["exists"] else "does not exist (yet, or any more)"
        print(f"Job {job_id}'s checkpoint directory {found['directory']} {state}")
        return
    rows = [(f["path"], _size(f["size"]), (f["modified"] or "")[:19].replace("T", " ")) for f in found["files"]]
    print_table(("FILE", "SIZE", "MODIFIED (UTC)"), rows, f"in {found['directory']}", wide="FILE")


def _read_file(path: Path) -> dict[str, Any]:
    import tomllib

    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise UsageProblem(f"cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageProblem(f"{path} is not TOML: {exc}") from None
    unknown = sorted(set(data) - set(FILE_KEYS))
    if unknown:
        raise UsageProblem(f"{path}: unknown key {unknown[0]!r}; an environment file has {', '.join(FILE_KEYS)}")
    bad = next((k for k, v in data.items() if not isinstance(v, str)), None)
    if bad is not None:
        raise UsageProblem(f"{path}: {bad} must be a string, e.g. {bad} = \"...\"")
    return dict(data)


def _what(env: dict[str, Any]) -> str:
    parts = []
    if env.get("image"):
        parts.append(f"image {env['image']}" + (f" ({env['runtime']})" if env.get("runtime") else ""))
    if env.get("python"):
        parts.append(f"python {env['python']}")
    if env.get("setup"):
        parts.append(f"setup: {env['setup']}")
    return "; ".join(parts)


def _scope(item: dict[str, Any]) -> str:
    return f"lab {item['lab']}" if item.get("lab") else "everyone"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)
