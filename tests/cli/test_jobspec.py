"""`nanum submit` values and script headers: what users type, what the server receives, and clear refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nanum.cli.common import UsageProblem
from nanum.cli.jobspec import (
    SubmitOptions,
    build_request,
    parse_env,
    parse_mem,
    parse_time,
    read_script_header,
)


@pytest.mark.parametrize(
    ("text", "mib"),
    [
        pytest.param("512M", 512, id="mebibytes"),
        pytest.param("32G", 32 * 1024, id="gibibytes"),
        pytest.param("32g", 32 * 1024, id="lower-case"),
        pytest.param("1T", 1024 * 1024, id="tebibytes"),
        pytest.param("1.5G", 1536, id="fraction"),
        pytest.param("64GB", 64 * 1024, id="GB-suffix"),
        pytest.param("16GiB", 16 * 1024, id="GiB-suffix"),
        pytest.param("2048", 2048, id="bare-number-is-MiB"),
    ],
)
def test_mem_becomes_mebibytes(text: str, mib: int) -> None:
    assert parse_mem(text) == mib


@pytest.mark.parametrize("text", ["", "lots", "32X", "-1G", "0G", "G"])
def test_bad_mem_is_refused_naming_the_option_and_an_example(text: str) -> None:
    with pytest.raises(UsageProblem, match=r"--mem: .*(32G|512M)"):
        parse_mem(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("90s", 90, id="seconds"),
        pytest.param("30m", 1800, id="minutes"),
        pytest.param("4h", 4 * 3600, id="hours"),
        pytest.param("2d", 2 * 86400, id="days"),
        pytest.param("1.5h", 5400, id="fraction"),
        pytest.param("90", 90 * 60, id="bare-number-is-minutes-like-sbatch"),
        pytest.param("30:00", 1800, id="minutes-seconds"),
        pytest.param("1:30:00", 5400, id="hours-minutes-seconds"),
        pytest.param("2-00:00:00", 2 * 86400, id="days-hours-minutes-seconds"),
        pytest.param("1-12", 86400 + 12 * 3600, id="days-hours"),
        pytest.param("1-00:30", 86400 + 1800, id="days-hours-minutes"),
    ],
)
def test_time_becomes_seconds(text: str, seconds: int) -> None:
    assert parse_time(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "4x", "1:2:3:4", "-5", "0", "0:00", "a-01:00"])
def test_bad_time_is_refused_with_examples(text: str) -> None:
    with pytest.raises(UsageProblem, match=r"--time: .*4h"):
        parse_time(text)


def test_env_pairs_and_copied_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", "/data/hf")
    assert parse_env(["SEED=1", "EMPTY=", "EQ=a=b", "HF_HOME"]) == {
        "SEED": "1", "EMPTY": "", "EQ": "a=b", "HF_HOME": "/data/hf"}


@pytest.mark.parametrize(
    ("item", "message"),
    [
        pytest.param("1X=2", "not NAME=VALUE", id="bad-name"),
        pytest.param("=2", "not NAME=VALUE", id="no-name"),
        pytest.param("NOT_SET_ANYWHERE_X", "not set here", id="missing-copy"),
    ],
)
def test_bad_env_is_refused(item: str, message: str) -> None:
    with pytest.raises(UsageProblem, match=f"--env: .*{message}"):
        parse_env([item])


def write_script(path: Path, text: str, executable: bool = False) -> Path:
    path.write_text(text)
    path.chmod(0o755 if executable else 0o644)
    return path


def test_script_headers_set_defaults_until_the_first_command(tmp_path: Path) -> None:
    script = write_script(tmp_path / "train.sh", (
        "#!/bin/bash\n"
        "# train the model\n"
        "#NANUM --gpus 2 --time 4h\n"
        "\n"
        "#NANUM --mem=32G --env SEED=1 --env WANDB_MODE=offline   # a trailing comment\n"
        "#NANUM --no-preempt --no-requeue --name 'big run'\n"
        "python train.py\n"
        "#NANUM --gpus 8\n"
    ))
    options = read_script_header(script)
    assert options == SubmitOptions(gpus=2, time_limit_s=4 * 3600, memory_mb=32 * 1024,
                                    env={"SEED": "1", "WANDB_MODE": "offline"}, preemptible=False,
                                    requeue=False, name="big run")


def test_a_bad_header_names_the_script_line_and_option(tmp_path: Path) -> None:
    script = write_script(tmp_path / "job.sh", "#!/bin/sh\n#NANUM --gpus two\ntrue\n")
    with pytest.raises(UsageProblem, match=r"job.sh line 2: --gpus: 'two' is not a whole number"):
        read_script_header(script)
    script.write_text("#NANUM --gpus 1_6\n")  # Python's int reads 16
    with pytest.raises(UsageProblem, match=r"job.sh line 1: --gpus: '1_6' is not a whole number"):
        read_script_header(script)
    script.write_text("#NANUM --gpu 2\n")
    with pytest.raises(UsageProblem, match=r"job.sh line 1: unknown option '--gpu'"):
        read_script_header(script)
    script.write_text("#NANUM --time\n")
    with pytest.raises(UsageProblem, match=r"line 1: --time needs a value"):
        read_script_header(script)


def test_command_line_flags_win_over_script_headers(tmp_path: Path) -> None:
    write_script(tmp_path / "train.sh", "#NANUM --gpus 2 --time 4h --env A=script --env B=script\nrun\n")
    cli = SubmitOptions(gpus=1, env={"A": "cli"})
    body = build_request(["train.sh", "--epochs", "3"], cli, tmp_path)
    assert body["gpus"] == 1
    assert body["time_limit_s"] == 4 * 3600
    assert body["env"] == {"A": "cli", "B": "script"}
    assert body["name"] == "train.sh"


def test_scripts_run_by_absolute_path_or_their_interpreter(tmp_path: Path) -> None:
    write_script(tmp_path / "exe.sh", "#!/bin/bash\necho hi\n", executable=True)
    write_script(tmp_path / "plain.sh", "echo hi\n")
    write_script(tmp_path / "tool.py", "#!/usr/bin/env python3\nprint(1)\n")
    assert build_request(["exe.sh", "a"], SubmitOptions(), tmp_path)["command"] == [
        str(tmp_path / "exe.sh"), "a"]
    assert build_request(["./plain.sh"], SubmitOptions(), tmp_path)["command"] == [
        "bash", str(tmp_path / "plain.sh")]
    assert build_request(["tool.py"], SubmitOptions(), tmp_path)["command"] == [
        "/usr/bin/env", "python3", str(tmp_path / "tool.py")]


def test_a_plain_command_is_sent_as_given_with_the_current_directory(tmp_path: Path) -> None:
    body = build_request(["python", "-c", "print(1)"], SubmitOptions(memory_mb=512), tmp_path)
    assert body == {"command": ["python", "-c", "print(1)"], "name": "python", "workdir": str(tmp_path),
                    "env": {}, "memory_mb": 512}


def test_a_relative_workdir_is_made_absolute(tmp_path: Path) -> None:
    body = build_request(["true"], SubmitOptions(workdir="runs/1"), tmp_path)
    assert body["workdir"] == str(tmp_path / "runs" / "1")
    assert os.path.isabs(build_request(["true"], SubmitOptions(workdir="/srv"), tmp_path)["workdir"])


def test_every_field_the_api_takes_is_an_option_sent_as_given(tmp_path: Path) -> None:
    from nanum.jobfields import SubmitFields

    for field in set(SubmitFields.__annotations__) - {"name", "workdir", "env"}:
        assert build_request(["true"], SubmitOptions(**{field: 1}), tmp_path)[field] == 1, field
    with pytest.raises(TypeError, match="not an option of a submission: gpu"):
        SubmitOptions(gpu=1)


def test_nothing_to_run_is_refused_with_an_example(tmp_path: Path) -> None:
    with pytest.raises(UsageProblem, match=r"nothing to run.*nanum submit --gpus 1 -- python train\.py"):
        build_request([], SubmitOptions(), tmp_path)


def test_every_submit_option_works_in_a_nanum_line_short_and_long(tmp_path: Path) -> None:
    script = write_script(tmp_path / "job.sh", (
        "#!/bin/bash\n"
        "#NANUM -J short-name -g 2 -N 1 -c 4 -t 30m -D /srv -e A=1 -o out-%j.txt\n"
        "#NANUM --array 0-9%2 --after 1 --after-ok 2,3 --after-failed 4 --after-any 5_1 --keep-if-unmet\n"
        "#NANUM --retries 2 --error err-%a.txt --priority 5 --lab vision --gpu-model A100 --mem 1G --no-preempt\n"
        "true\n"
    ))
    options = read_script_header(script)
    assert options == SubmitOptions(
        name="short-name", gpus=2, nodes=1, cpus=4, time_limit_s=1800, workdir="/srv", env={"A": "1"},
        output="out-%j.txt", array="0-9%2", after=["1"], after_ok=["2", "3"], after_failed=["4"],
        after_any=["5_1"], keep_if_unmet=True, retries=2, error="err-%a.txt", priority=5, lab="vision",
        gpu_model="A100", memory_mb=1024, preemptible=False)


@pytest.mark.parametrize(("line", "words", "note"), [
    pytest.param("#SBATCH --gres=gpu:2", ["--gpus", "2"], "used as --gpus 2", id="gres"),
    pytest.param("#SBATCH --gres=gpu:a100:4", ["--gpus", "4", "--gpu-model", "A100"], "used as", id="gres-model"),
    pytest.param("#SBATCH -G 3", ["--gpus", "3"], "used as", id="G"),
    pytest.param("#SBATCH --gpus=h100:1", ["--gpus", "1", "--gpu-model", "H100"], "used as", id="gpus-model"),
    pytest.param("#SBATCH -t 1:00:00 -J run", ["--time", "1:00:00", "--name", "run"], "used as", id="short"),
    pytest.param("#SBATCH -c8 --mem=16G", ["--cpus", "8", "--mem", "16G"], "used as", id="attached"),
    pytest.param("#SBATCH --array=0-9%2", ["--array", "0-9%2"], "used as", id="array"),
    pytest.param("#SBATCH --dependency=afterok:12:13,afterany:14",
                 ["--after-ok", "12,13", "--after-any", "14"], "used as", id="dependency"),
    pytest.param("#SBATCH -o log-%j.out -e log-%j.err", ["--output", "log-%j.out", "--error", "log-%j.err"],
                 "used as", id="output"),
    pytest.param("#SBATCH --partition=vision", ["--lab", "vision"], "used as --lab vision", id="partition"),
    pytest.param("#SBATCH --mail-type=END", [], "ignored: nanum has no per-job mail", id="mail"),
    pytest.param("#SBATCH --requeue", ["--requeue"], "used as --requeue", id="requeue"),
    pytest.param("#SBATCH --no-requeue -N 2", ["--no-requeue", "--nodes", "2"], "used as", id="no-requeue"),
    pytest.param("#SBATCH --dependency=afterok:1?afterok:2", [], "ignored: dependencies joined with '?'", id="or"),
    pytest.param('#BSUB -gpu "num=2:mode=shared"', ["--gpus", "2"], "used as --gpus 2", id="bsub-gpu"),
    pytest.param("#BSUB -W 2:30", ["--time", "9000s"], "used as", id="bsub-W"),
    pytest.param("#BSUB -J sweep[1-10]%2", ["--name", "sweep", "--array", "1-10%2"], "used as", id="bsub-array"),
    pytest.param("#BSUB -n 4 -o out.%J.%I -e err", ["--cpus", "4", "--output", "out.%j.%a", "--error", "err"],
                 "used as", id="bsub-n-o-e"),
    pytest.param("#BSUB -q gpu", [], "ignored: queues are not labs", id="bsub-queue"),
])
def test_slurm_and_lsf_lines_become_nanum_options_or_are_ignored_with_why(
        line: str, words: list[str], note: str) -> None:
    import shlex

    from nanum.cli.foreign import translate

    kind, _, rest = line.partition(" ")
    got, said = translate(kind, shlex.split(rest))
    assert got == words and said.startswith(note)


def test_nanum_lines_win_over_sbatch_lines_and_every_foreign_line_is_reported(tmp_path: Path) -> None:
    from nanum.cli.jobspec import read_script

    script = write_script(tmp_path / "job.sh", (
        "#!/bin/bash\n#SBATCH --gres=gpu:4\n#NANUM --gpus 1\n#SBATCH --qos=high\n#SBATCH -J x\nrun\n"))
    options, notes = read_script(script)
    assert (options["gpus"], options["name"]) == (1, "x")
    assert notes == ["job.sh line 2: #SBATCH --gres=gpu:4: used as --gpus 4",
                     "job.sh line 4: #SBATCH --qos=high: ignored: nanum has no QOS; priorities are 0..100 "
                     "(#NANUM --priority)",
                     "job.sh line 5: #SBATCH -J x: used as --name x"]


def test_output_files_wrap_the_command_with_the_patterns(tmp_path: Path) -> None:
    body = build_request(["python", "t.py"], SubmitOptions(output="o-%x-%j.txt", name="run"), tmp_path)
    assert body["command"][:2] == ["/bin/sh", "-c"]
    assert body["command"][3:] == ["nanum-output", "o-run-%j.txt", "", "python", "t.py"]
