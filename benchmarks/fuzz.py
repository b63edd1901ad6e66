"""Fuzz the whole published API with schemathesis and report what it answered.

    .venv/bin/python benchmarks/fuzz.py                      # about 20,000 cases on SQLite
    .venv/bin/python benchmarks/fuzz.py --db postgresql+psycopg://postgres@127.0.0.1:5432/test
    .venv/bin/python benchmarks/fuzz.py --examples 20 --scenarios 20   # a quick look

The app runs in this process with its scheduler, over a fresh database (PostgreSQL: a schema of its own, dropped
afterwards). Phase one sends `--examples` requests to each of the API's operations, valid and invalid ones alike,
as an admin, a member or a node; phase two follows the links between operations in `--scenarios` scenarios of up
to `--steps` calls (see `tests/server/fuzzing.py`). Printed: cases run, statuses by class and by code, and each
server error (5xx) and response outside the published schema with the first request that caused it and how
often it recurred. Exits 1 if there was any.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.server.fuzzing import Fuzzer, Tally, prepare

from nanum.server.context import ServerContext
from nanum.server.settings import ServerSettings
from nanum.store import Database, upgrade

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@contextlib.contextmanager
def database(url: str | None, home: Path) -> Iterator[Database]:
    if url is None:
        db = Database(f"sqlite:///{home / 'nanum.db'}")
        upgrade(db)
        yield db
        db.dispose()
        return
    schema = f"nanum_fuzz_{os.getpid()}_{secrets.token_hex(3)}"
    admin = create_engine(url)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    db = Database(url, connect_args={"options": f"-csearch_path={schema}"})
    try:
        upgrade(db)
        yield db
    finally:
        db.dispose()
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=500, help="requests per operation (default 500)")
    ap.add_argument("--scenarios", type=int, default=400, help="stateful scenarios (default 400)")
    ap.add_argument("--steps", type=int, default=15, help="most calls in one scenario (default 15)")
    ap.add_argument("--db", help=f"a PostgreSQL URL, e.g. {PG_URL} (default: SQLite in a fresh directory)")
    ap.add_argument("--random", action="store_true", help="new cases each run (default: the same ones)")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="nanum-fuzz-"))
    tally = Tally()
    began = time.monotonic()
    try:
        with database(args.db, home) as db:
            ctx = ServerContext.create(ServerSettings(home=home / "home"), db)
            fuzzer = Fuzzer(ctx, prepare(ctx), tally)
            try:
                fuzzer.run_operations(args.examples, derandomize=not args.random)
                single = tally.cases
                fuzzer.run_stateful(args.scenarios, args.steps)
            finally:
                fuzzer.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    took = time.monotonic() - began
    print(f"{'PostgreSQL' if args.db else 'SQLite'}: {tally.cases} cases in {took:.0f} s "
          f"({single} single requests, {tally.cases - single} in stateful scenarios)")
    print(tally.report())
    print(f"server errors: {len(tally.server_errors())} kinds, {sum(n for _, n in tally.server_errors())} responses; "
          f"outside the schema: {len(tally.nonconforming())} kinds")
    if tally.findings or tally.background:
        sys.exit(1)


if __name__ == "__main__":
    main()
