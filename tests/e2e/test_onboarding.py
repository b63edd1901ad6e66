"""Bringing people in with the real `nanum` against a real `nanum up`: a CSV of users imported twice (the second
time changes nothing), and `nanum user add` telling the admin how the new person logs in."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.e2e

CSV = """name,unix_user,labs,role,email
kim,kim,vision,member,kim@uni.example
lee,jlee,vision;nlp,manager,
park,park,robotics,admin,park@uni.example
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("nanum-onboarding"))
    try:
        c.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield c
    finally:
        c.stop()


def test_a_csv_imported_twice_changes_nothing_the_second_time(cluster: Cluster, tmp_path: Path) -> None:
    users = tmp_path / "users.csv"
    users.write_text(CSV)
    tokens = tmp_path / "tokens.csv"
    first = cluster.nanum("user", "import", str(users), "--tokens", str(tokens))
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == "3 created, 0 changed, 0 unchanged"
    assert "create lee: unix_user none -> jlee; labs none -> nlp (manager), vision (manager)" in first.stdout
    assert tokens.stat().st_mode & 0o077 == 0
    written = {row["name"]: row["token"] for row in csv.DictReader(tokens.read_text().splitlines())}
    assert set(written) == {"kim", "lee", "park"}
    cluster.tokens["lee"] = written["lee"]
    members = cluster.nanum("lab", "member", "list", "nlp", user="lee")
    assert members.returncode == 0 and "lee" in members.stdout and "manager" in members.stdout
    second = cluster.nanum("user", "import", str(users))
    assert (second.returncode, second.stdout) == (0, "0 created, 0 changed, 3 unchanged\n")
    users.write_text(CSV.replace("kim,kim,vision,member,kim@uni.example", "kim,kim,nlp,member,kim@uni.example"))
    third = cluster.nanum("user", "import", str(users), "--dry-run")
    assert third.stdout.splitlines() == ["would change kim: labs vision -> nlp",
                                         "dry run: 0 to create, 1 to change, 2 unchanged; nothing was changed"]


def test_user_add_says_how_the_new_person_logs_in(cluster: Cluster) -> None:
    added = cluster.nanum("user", "add", "newcomer", "--lab", "vision", "--unix-user", "newcomer")
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    assert f"newcomer logs in with: nanum login {cluster.url} --token {token}" in added.stderr
    assert f"{cluster.url}/login" in added.stderr
