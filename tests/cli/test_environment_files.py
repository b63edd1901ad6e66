"""The environment presets in examples/environments/ read as `nanum environment add --file` reads them, and each
is an environment the server accepts; a bad file is refused in words."""

from __future__ import annotations

from pathlib import Path

import pytest

from nanum.cli.base import UsageProblem
from nanum.cli.environments import _read_file
from nanum.server.environment_schemas import EnvironmentIn

PRESETS = sorted((Path(__file__).parents[2] / "examples" / "environments").glob("*.toml"))


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_each_preset_is_an_environment_the_server_accepts(path: Path) -> None:
    fields = _read_file(path)
    env = EnvironmentIn(**fields)
    assert env.name and env.description and (env.image or env.python or env.setup)


def test_there_is_a_preset_of_each_kind() -> None:
    kinds = {k for p in PRESETS for k in ("image", "python", "setup") if k in _read_file(p)}
    assert kinds == {"image", "python", "setup"}


@pytest.mark.parametrize(("text", "words"), [
    ('name = "x"\nimages = "a"\n', "unknown key 'images'"),
    ("name = 1\n", "name must be a string"),
    ("name = \n", "is not TOML"),
])
def test_a_bad_file_is_refused_saying_what_is_wrong(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "env.toml"
    path.write_text(text)
    with pytest.raises(UsageProblem, match=words):
        _read_file(path)
