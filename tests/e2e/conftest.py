"""End-to-end fixtures: a real `nanum up` with 4 simulated GPUs and four researchers with tokens."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, job_account, remove, shared_dir
from tests.store.databases import create_pg_schema, drop_pg_schema, pg_schema_url

USERS = ("alice", "bob", "carol", "dave")


def _cluster(root: Path) -> Iterator[Cluster]:
    cluster = Cluster(root)
    try:
        cluster.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    account = job_account()
    for i, name in enumerate(USERS):
        cluster.add_user(name, account, "vision" if i % 2 == 0 else "nlp")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster shared by a module's tests (each test leaves it idle)."""
    yield from _cluster(tmp_path_factory.mktemp("nanum-e2e"))


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A cluster for one test, for tests that kill it."""
    yield from _cluster(tmp_path)


@pytest.fixture
def database() -> Iterator[str]:
    """A fresh schema in the PostgreSQL test database, as a URL `nanum server --db` takes."""
    schema = create_pg_schema()
    yield pg_schema_url(schema)
    drop_pg_schema(schema)


@pytest.fixture
def workdir() -> Iterator[Path]:
    """Where jobs run and write: writable by the jobs' account."""
    path = shared_dir("nanum-e2e-")
    yield path
    remove(path)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if shutil.which("date") is None:  # jobs timestamp themselves with GNU date
        for item in items:
            item.add_marker(pytest.mark.skip(reason="needs GNU date"))
