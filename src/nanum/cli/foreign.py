"""Reading the `#SBATCH` (Slurm) and `#BSUB` (LSF) lines of a script people bring with them, as nanum options.

Each line becomes `#NANUM` words plus a note saying what it became, or why it was ignored:

    #SBATCH --gres=gpu:2          -> --gpus 2
    #SBATCH -t 1:00:00            -> --time 1:00:00
    #SBATCH --dependency=afterok:12:13  -> --after-ok 12,13
    #SBATCH --mail-type=END       -> ignored (nanum has no per-job mail; `nanum notify` sets who is told)
    #BSUB -gpu "num=2:mode=shared" -> --gpus 2
    #BSUB -W 2:30                 -> --time 9000s  (LSF's -W is [hours:]minutes)
    #BSUB -J "sweep[1-10]%2"      -> --name sweep --array 1-10%2

Slurm's output patterns (%j, %A, %a, %x) are nanum's; LSF's %J and %I become %j and %a. docs/migrating.md has
the whole table.
"""

from __future__ import annotations

import re

#: Slurm options (long names; short ones are mapped to these) -> the nanum option taking the same value.
_SLURM_SAME = {
    "--time": "--time", "--job-name": "--name", "--cpus-per-task": "--cpus", "--mem": "--mem",
    "--array": "--array", "--output": "--output", "--error": "--error", "--partition": "--lab",
    "--nodes": "--nodes", "--chdir": "--workdir", "--priority": "--priority",
}
_SLURM_SHORT = {"-t": "--time", "-J": "--job-name", "-c": "--cpus-per-task", "-a": "--array", "-o": "--output",
                "-e": "--error", "-p": "--partition", "-N": "--nodes", "-D": "--chdir", "-G": "--gpus",
                "-d": "--dependency"}
#: Short Slurm flags (they take no value) -> their long names.
_SLURM_SHORT_FLAGS = {"-H": "--hold"}
#: Slurm flags nanum has under the same name.
_SLURM_FLAGS_SAME = {"--requeue", "--no-requeue", "--hold"}
_SLURM_FLAGS_IGNORED = {"--exclusive", "--export", "--wait",
                        "--parsable", "--test-only"}
_DEPENDENCY = {"after": "--after", "afterok": "--after-ok", "afternotok": "--after-failed",
               "afterany": "--after-any"}
_WHY = {
    "--mail-type": "nanum has no per-job mail; `nanum notify` sets who is told of what",
    "--mail-user": "nanum has no per-job mail; `nanum notify` sets who is told of what",
    "--account": "a lab is charged instead: give --partition or #NANUM --lab",
    "--qos": "nanum has no QOS; priorities are 0..100 (#NANUM --priority)",
    "--ntasks": "nanum starts one process per node; use --nodes and --gpus per node",
    "--ntasks-per-node": "nanum starts one process per node (torchrun variables are set for gangs)",
}


def translate(kind: str, words: list[str]) -> tuple[list[str], str]:
    """The nanum words for one `#SBATCH` or `#BSUB` line, and a note: `used as ...` or `ignored: why`."""
    try:
        out = _slurm(words) if kind == "#SBATCH" else _lsf(words)
    except _Ignored as exc:
        return [], f"ignored: {exc}"
    return out, "used as " + " ".join(out)


class _Ignored(Exception):
    """Why a directive line is not followed."""


def _pairs(words: list[str], short: dict[str, str], takes_value: set[str]) -> list[tuple[str, str | None]]:
    """(option, value) pairs from `--opt=v`, `--opt v`, `-x v` and `-xv`."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            opt, eq, value = word.partition("=")
        elif word[:2] in short and len(word) > 2:
            opt, eq, value = word[:2], "=", word[2:]
        else:
            opt, eq, value = word, "", ""
        if not word.startswith("-"):
            raise _Ignored(f"{word!r} is not an option")
        if not eq and opt in takes_value:
            if i + 1 >= len(words):
                raise _Ignored(f"{opt} needs a value")
            value, i = words[i + 1], i + 1
            eq = "="
        out.append((opt, value if eq else None))
        i += 1
    return out


def _slurm(words: list[str]) -> list[str]:
    takes = set(_SLURM_SHORT) | set(_SLURM_SAME) | set(_WHY) | {"--gres", "--gpus", "--gpus-per-node",
                                                                  "--dependency", "--chdir"}
    out: list[str] = []
    short = {**_SLURM_SHORT, **_SLURM_SHORT_FLAGS}
    for opt, value in _pairs(words, short, takes):
        opt = short.get(opt, opt)
        if opt in _WHY:
            raise _Ignored(_WHY[opt])
        if opt in _SLURM_FLAGS_IGNORED:
            raise _Ignored(f"{opt} has no nanum equivalent here")
        if opt in _SLURM_FLAGS_SAME and value is None:
            out.append(opt)
            continue
        if value is None:
            raise _Ignored(f"nanum does not know {opt}")
        if opt in _SLURM_SAME:
            out += [_SLURM_SAME[opt], _slurm_mem(value) if opt == "--mem" else value]
        elif opt == "--gres":
            out += _gres(value)
        elif opt in ("--gpus", "--gpus-per-node"):
            out += _gpu_count(value, opt)
        elif opt == "--dependency":
            out += _dependency(value)
        else:
            raise _Ignored(f"nanum does not know {opt}")
    return out


def _slurm_mem(value: str) -> str:
    """Slurm's --mem: a bare number is megabytes (nanum's too); it may end in K, M, G or T."""
    return value.rstrip("bB") if re.match(r"^\d+[KMGTkmgt]?[bB]?$", value) else value


def _gres(value: str) -> list[str]:
    """`gpu:2`, `gpu:a100:2`, `gpu` (one) -> --gpus N [--gpu-model MODEL]."""
    for item in value.split(","):
        parts = item.split(":")
        if parts[0] != "gpu":
            continue
        count = parts[-1] if len(parts) > 1 and parts[-1].isdigit() else "1"
        model = parts[1] if len(parts) == 3 or (len(parts) == 2 and not parts[1].isdigit()) else None
        return ["--gpus", count] + (["--gpu-model", model.upper()] if model else [])
    raise _Ignored(f"--gres={value} asks for no GPU; nanum schedules GPUs, CPUs and memory only")


def _gpu_count(value: str, opt: str) -> list[str]:
    """`2` or `a100:2` -> --gpus 2 [--gpu-model A100]."""
    model, _, count = value.rpartition(":")
    if not count.isdigit():
        raise _Ignored(f"{opt}={value} is not a GPU count")
    return ["--gpus", count] + (["--gpu-model", model.upper()] if model else [])


def _dependency(value: str) -> list[str]:
    """`afterok:12:13,afterany:14` -> --after-ok 12,13 --after-any 14 (all must hold; `?` is not supported)."""
    if "?" in value:
        raise _Ignored("dependencies joined with '?' (any one of) are not supported; nanum needs all of them")
    out: list[str] = []
    for item in value.split(","):
        kind, _, ids = item.partition(":")
        if kind not in _DEPENDENCY or not ids:
            raise _Ignored(f"dependency {item!r} is not after, afterok, afternotok or afterany with job IDs")
        out += [_DEPENDENCY[kind], ",".join(i.split("+")[0] for i in ids.split(":"))]
    return out


# -- LSF ---------------------------------------------------------------------------------------------------------

_LSF_TAKES = {"-gpu", "-W", "-J", "-n", "-o", "-e", "-q", "-R", "-P", "-u", "-B", "-N", "-oo", "-eo", "-cwd",
              "-w"}
_LSF_WHY = {
    "-q": "queues are not labs in nanum; give #NANUM --lab",
    "-R": "resource strings are not read; give #NANUM --mem or --gpu-model",
    "-P": "projects are not labs in nanum; give #NANUM --lab",
    "-u": "nanum has no per-job mail; `nanum notify` sets who is told of what",
    "-B": "nanum has no per-job mail; `nanum notify` sets who is told of what",
    "-N": "nanum has no per-job mail; `nanum notify` sets who is told of what",
    "-w": "LSF dependency expressions are not read; give #NANUM --after-ok ID",
}


def _lsf(words: list[str]) -> list[str]:
    out: list[str] = []
    for opt, value in _pairs(words, {}, _LSF_TAKES):
        if opt in _LSF_WHY:
            raise _Ignored(_LSF_WHY[opt])
        if opt == "-H" and value is None:  # submitted held, as bsub -H
            out.append("--hold")
            continue
        if value is None:
            raise _Ignored(f"nanum does not know {opt}")
        if opt == "-gpu":
            found = re.search(r"num=(\d+)", value)
            out += ["--gpus", found.group(1) if found else "1"]
        elif opt == "-W":
            out += ["--time", f"{_lsf_minutes(value) * 60}s"]
        elif opt == "-J":
            out += _lsf_name(value)
        elif opt == "-n":
            out += ["--cpus", value]
        elif opt in ("-o", "-oo", "-e", "-eo"):
            pattern = value.replace("%J", "%j").replace("%I", "%a")
            out += ["--output" if opt.startswith("-o") else "--error", pattern]
        elif opt == "-cwd":
            out += ["--workdir", value]
        else:
            raise _Ignored(f"nanum does not know {opt}")
    return out


def _lsf_minutes(value: str) -> int:
    """LSF's -W: `[hours:]minutes`."""
    hours, _, minutes = value.rpartition(":")
    if not minutes.isdigit() or (hours and not hours.isdigit()):
        raise _Ignored(f"-W {value} is not [hours:]minutes")
    return int(hours or 0) * 60 + int(minutes)


def _lsf_name(value: str) -> list[str]:
    """`name` -> --name name; `name[1-10]%2` (an LSF array) -> --name name --array 1-10%2."""
    found = re.match(r"^(.*?)\[([0-9,:-]+)\](%\d+)?$", value)
    if not found:
        return ["--name", value]
    name = found.group(1) or "array"
    return ["--name", name, "--array", found.group(2) + (found.group(3) or "")]
