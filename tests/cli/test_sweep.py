"""Sweep files: grids and random searches expand into trials; metrics are read from output lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from nanum.cli.common import UsageProblem
from nanum.cli.jobcmds import submit_options
from nanum.cli.sweep import MAX_TRIALS, SUBMIT_KEYS, SWEEP_KEYS, commands, parse_metric, submit_keys, trials
from nanum.server.limits import MAX_ARGS
from tests.cli.conftest import Nanum
from tests.cli.fakeapi import FakeApi

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "sweeps.md"


def test_a_grid_is_every_combination_in_order() -> None:
    sets = trials({"grid": {"lr": [0.1, 0.01], "batch": [32, 64, 128]}}, "s.toml")
    assert len(sets) == 6 and sets[0] == {"lr": 0.1, "batch": 32} and sets[-1] == {"lr": 0.01, "batch": 128}


def test_a_random_search_draws_within_bounds_and_is_repeatable() -> None:
    spec = {"random": {"trials": 20, "seed": 3, "lr": {"min": 1e-4, "max": 1e-1, "log": True},
                       "layers": {"min": 2, "max": 8}, "opt": ["adam", "sgd"]}}
    sets = trials(spec, "s.toml")
    assert sets == trials(spec, "s.toml") and len(sets) == 20
    assert all(1e-4 <= s["lr"] <= 1e-1 and 2 <= s["layers"] <= 8 and s["opt"] in ("adam", "sgd") for s in sets)
    assert all(isinstance(s["layers"], int) for s in sets)


@pytest.mark.parametrize(("spec", "message"), [
    pytest.param({}, "either a \\[grid\\] or a \\[random\\]", id="neither"),
    pytest.param({"grid": {"lr": 0.1}}, "needs a list of values", id="grid-scalar"),
    pytest.param({"random": {"lr": [1]}}, "trials = N", id="random-no-count"),
    pytest.param({"random": {"trials": 2, "lr": "x"}}, "min = A, max = B", id="random-bad"),
    pytest.param({"random": {"trials": True, "lr": [1]}}, "trials = N", id="random-count-true"),
    # refused before a trial is made: this grid was built in memory until the kernel killed the command
    pytest.param({"grid": {f"p{i}": list(range(10)) for i in range(12)}},
                 r"makes 1,000,000,000,000 trials \((10 x ){11}10 values\); a sweep runs at most 996 trials",
                 id="grid-too-many"),
    pytest.param({"grid": {"a": list(range(997))}}, "makes 997 trials; a sweep runs at most 996", id="grid-997"),
    pytest.param({"random": {"trials": 10**8, "lr": [1]}}, "asks for 100,000,000 trials; a sweep runs at most 996",
                 id="random-too-many"),
])
def test_bad_sweeps_say_what_to_write(spec: dict[str, object], message: str) -> None:
    with pytest.raises(UsageProblem, match=message):
        trials(spec, "s.toml")


def test_the_most_trials_a_sweep_takes_fill_one_jobs_arguments() -> None:
    assert len(trials({"grid": {"a": list(range(MAX_TRIALS))}}, "s.toml")) == MAX_TRIALS == MAX_ARGS - 4


def test_a_sweep_too_large_for_one_job_is_refused_naming_its_file(tmp_path: Path, api: FakeApi, nanum: Nanum) -> None:
    """The server's refusal ('invalid command: the command is 104,462 bytes') named a command the user never
    wrote; the sweep's own check names the file and what to change, and sends nothing."""
    values = ", ".join(f'"{n:03d}{"x" * 200}"' for n in range(400))
    (tmp_path / "big.toml").write_text(f'command = "train {{a}}"\n[grid]\na = [{values}]\n')
    result = nanum("sweep", str(tmp_path / "big.toml"))
    assert result.exit_code == 2, result.output
    assert "big.toml: the 400 trials' commands come to" in result.stderr
    assert "a job takes at most 65,536; give fewer trials or shorter values" in result.stderr
    assert api.requests == []


def test_placeholders_are_filled_and_quoted() -> None:
    assert commands("train --lr {lr} --name {n}", [{"lr": 0.1, "n": "a b"}], "s") == ["train --lr 0.1 --name 'a b'"]
    with pytest.raises(UsageProblem, match="names 'x' which no parameter gives"):
        commands("train {x}", [{"lr": 1}], "s")


def test_a_nul_byte_in_a_sweep_is_refused_naming_the_sweep(tmp_path: Path, api: FakeApi, nanum: Nanum) -> None:
    """The server named the array's argument it reached ('command[4] contains a NUL byte'), not the sweep line."""
    (tmp_path / "nul.toml").write_text('command = "train --opt {opt}"\n[grid]\nopt = ["adam", "sg\\u0000d"]\n')
    result = nanum("sweep", str(tmp_path / "nul.toml"))
    assert result.exit_code == 2, result.output
    assert "nul.toml: a value of parameter opt ('sg\\x00d') contains a NUL byte; remove it" in result.stderr
    (tmp_path / "nul.toml").write_text('command = "train\\u0000 {opt}"\n[grid]\nopt = ["adam"]\n')
    assert "nul.toml: the command contains a NUL byte; remove it" in nanum("sweep", str(tmp_path / "nul.toml")).stderr
    assert api.requests == []


def test_metric_lines_give_the_last_value_of_each_name() -> None:
    found: dict[str, float] = {}
    for line in ("NANUM_METRIC loss=0.5 acc=0.7", "epoch 2", "NANUM_METRIC loss=0.25", "NANUM_METRIC bad=x"):
        parse_metric(line, found)
    assert found == {"loss": 0.25, "acc": 0.7}


def test_a_sweep_takes_submits_options_as_submit_reads_them() -> None:
    spec = {"command": "train {lr}", "grid": {"lr": [1]}, "max_running": 2, "gpus": 2, "nodes": 1,
            "gpu_model": "A100, H100", "gpu_mem": "40G", "constraint": "net=ib", "cpus": 8, "mem": 32768,
            "time": "4h", "priority": 5, "lab": "vision", "workdir": "/data/run", "env": {"SEED": "1"},
            "environment": "torch", "dataset": ["imagenet"], "no_preempt": True}
    options = submit_options(**submit_keys(spec, "s.toml"))
    assert options == {
        "gpus": 2, "nodes": 1, "gpu_model": "A100,H100", "gpu_memory_mb": 40960, "constraints": ["net=ib"], "cpus": 8,
        "memory_mb": 32768, "time_limit_s": 14400, "priority": 5, "lab": "vision", "workdir": "/data/run",
        "env": {"SEED": "1"}, "environment": "torch", "datasets": ["imagenet"], "preemptible": False}


@pytest.mark.parametrize(("extra", "message"), [
    pytest.param({"max_runing": 4}, "unknown key 'max_runing'; a sweep takes name, command, max_running", id="typo"),
    pytest.param({"memory": "32G"}, "unknown key 'memory'", id="not-a-flag-name"),
    pytest.param({"gpus": "2"}, "gpus = '2' is not a whole number", id="gpus-text"),
    pytest.param({"gpus": True}, "gpus = True is not a whole number", id="gpus-bool"),
    pytest.param({"constraint": [1]}, "constraint = \\[1\\] is not a list of text", id="constraint-number"),
    pytest.param({"env": {"SEED": 1}}, "env = {'SEED': 1} is not a table of text", id="env-number"),
    pytest.param({"no_preempt": "yes"}, "no_preempt = 'yes' is not true or false", id="flag-text"),
    pytest.param({"constraint": "net"}, "--constraint: cannot read 'net'", id="bad-label"),
    pytest.param({"mem": "lots"}, "--mem: cannot read 'lots'", id="bad-size"),
])
def test_a_key_a_sweep_does_not_take_or_a_bad_value_is_refused(extra: dict[str, object], message: str) -> None:
    with pytest.raises(UsageProblem, match=message):
        submit_options(**submit_keys({"command": "train", "grid": {"lr": [1]}, **extra}, "s.toml"))


def test_the_guide_names_every_key_a_sweep_file_takes() -> None:
    """docs/sweeps.md is where users learn the file's format: a key it leaves out is one they cannot find."""
    guide = GUIDE.read_text()
    missing = [key for key in (*SWEEP_KEYS, *SUBMIT_KEYS) if f"`{key}`" not in guide and f"`[{key}]`" not in guide]
    assert missing == []

