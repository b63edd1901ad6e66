"""Job revisions (`nanum.store.revs`), on SQLite and PostgreSQL: the scheduler reads only the job rows written since
its last read, so every way of writing a job must be seen by the next read, including a write that was still in
flight while the last read ran; and every GPU a job takes or frees, since it reads only those jobs' allocations."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, select, update

from nanum.core.model import Placement
from nanum.server.jobrows import JobRows
from nanum.store import AllocationRow, Database, JobRow, NodeRow, table
from tests.store.test_schema import _seed

COLUMNS = (JobRow.id, JobRow.state, JobRow.name, JobRow.priority)


def _read(db: Database, rows: JobRows) -> dict[int, tuple[str, str, int]]:
    with db.read() as s:
        if db.is_postgres:
            s.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        running, pending = rows.read(s, _names(s))
    return {r.id: (r.state, r.name, r.priority) for r in [*running, *pending]}


def _kept(db: Database, now: object, before: object) -> bool:
    """Whether a row not written since was kept, not read again. On PostgreSQL it may be read again whenever any
    other session of the database server (another test's, here) has a transaction open: the mark is the oldest
    transaction still running there (`nanum.store.revs`), and reading a row again is harmless; so there it must
    only be equal."""
    return now is before or (db.is_postgres and now == before)


def test_each_way_of_writing_a_job_reaches_the_next_read(database: Database) -> None:
    _, first, second, _ = _seed(database)
    rows = JobRows(COLUMNS)
    assert _read(database, rows) == {first: ("running", "j0", 0), second: ("running", "j1", 0)}
    unchanged = rows.running[second]
    with database.write() as s:  # a core statement, an ORM change and one inside a savepoint
        s.execute(update(JobRow).where(JobRow.id == first).values(state="pending", name="requeued"))
        job = s.get(JobRow, second)
        assert job is not None
        job.priority = 5
    assert _read(database, rows) == {first: ("pending", "requeued", 0), second: ("running", "j1", 5)}
    assert rows.running[second] is not unchanged
    kept = rows.pending[first]
    with database.write() as s, s.begin_nested():
        s.connection().execute(table(JobRow).update().where(JobRow.id == second).values(state="completed"))
    assert _read(database, rows) == {first: ("pending", "requeued", 0)}
    assert _kept(database, rows.pending[first], kept)  # not written since: the very same row


def test_a_write_still_in_flight_during_a_read_is_in_the_next_one(database: Database) -> None:
    _, first, _, _ = _seed(database)
    rows = JobRows(COLUMNS)
    _read(database, rows)
    with database.write() as s:
        s.execute(update(JobRow).where(JobRow.id == first).values(name="renamed"))
        s.flush()
        assert _read(database, rows)[first][1] == "j0"  # not committed yet: the read cannot see it
    assert _read(database, rows)[first][1] == "renamed"


def test_a_new_job_and_a_read_with_nothing_written(database: Database) -> None:
    _, first, _, _ = _seed(database)
    rows = JobRows(COLUMNS)
    _read(database, rows)
    before = {**rows.running, **rows.pending}
    _read(database, rows)
    after = {**rows.running, **rows.pending}
    assert after == before and all(_kept(database, after[k], before[k]) for k in before)
    with database.write() as s:
        row = s.get(JobRow, first)
        assert row is not None
        values = {c.key: getattr(row, c.key) for c in JobRow.__table__.columns if c.key not in ("id", "rev")}
        new = s.connection().execute(table(JobRow).insert().values(**{**values, "state": "pending", "name": "new"})
                                     .returning(table(JobRow).c.id)).scalar_one()
    assert _read(database, rows)[new] == ("pending", "new", 0)
    with database.read() as s:
        assert s.scalar(select(JobRow.rev).where(JobRow.id == new)) > 0


STATES = ("pending", "running", "completed", "failed", "cancelled")
#: One write: (job index, new state or None to add a job, new priority, GPU the job takes (0-3) or frees (4-7),
#: or none (8)).
Write = tuple[int, str | None, int, int]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(st.lists(st.tuples(st.integers(0, 9), st.none() | st.sampled_from(STATES),
                                          st.integers(0, 3), st.integers(0, 8)), max_size=6), min_size=1, max_size=6))
def test_reading_what_changed_matches_reading_everything(database: Database, rounds: list[list[Write]]) -> None:
    """Any mix of new jobs, state changes (requeues included), edits and GPUs taken or freed, read round by round
    as the scheduler does, gives the same running and pending rows, in the same order, and the same GPUs held, as
    a full read at the end of each round."""
    with database.read() as s:  # the database lives on from one example to the next
        first = s.scalar(select(JobRow.id).order_by(JobRow.id).limit(1))
    if first is None:
        _, first, _, _ = _seed(database)
    rows = JobRows(COLUMNS)
    _read(database, rows)
    with database.read() as s:
        template = s.get(JobRow, first)
        assert template is not None
        values = {c.key: getattr(template, c.key) for c in JobRow.__table__.columns if c.key not in ("id", "rev")}
    for writes in rounds:
        with database.write() as s:
            ids = list(s.scalars(select(JobRow.id).order_by(JobRow.id)))
            node = s.scalar(select(NodeRow.id).order_by(NodeRow.id).limit(1))
            for index, state, priority, gpu in writes:
                job_id = ids[index % len(ids)]
                if state is None:
                    s.execute(table(JobRow).insert().values(**{**values, "state": "pending", "priority": priority}))
                elif gpu < 4:  # the job takes this GPU from whoever holds it; nothing else of it is written
                    s.execute(delete(AllocationRow).where(AllocationRow.node_id == node,
                                                          AllocationRow.gpu_index == gpu))
                    s.execute(table(AllocationRow).insert().values(job_id=job_id, node_id=node, gpu_index=gpu))
                elif gpu < 8:
                    s.execute(delete(AllocationRow).where(AllocationRow.job_id == job_id,
                                                          AllocationRow.gpu_index == gpu - 4))
                else:
                    s.execute(update(JobRow).where(JobRow.id == job_id).values(state=state, priority=priority))
        running, pending = _read_lists(database, rows)
        fresh = JobRows(COLUMNS)
        _read_lists(database, fresh)
        assert rows.held == fresh.held
        with database.read() as s:
            active = s.execute(select(*COLUMNS).where(JobRow.state.in_(("pending", "running"))).order_by(JobRow.id))
            expected = [tuple(r) for r in active]
        assert sorted(running) == [r for r in expected if r[1] == "running"]
        assert pending == [r for r in expected if r[1] == "pending"]


def _read_lists(db: Database, rows: JobRows) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with db.read() as s:
        if db.is_postgres:
            s.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        running, pending = rows.read(s, _names(s))
    return [tuple(r) for r in running], [tuple(r) for r in pending]


def _names(s: object) -> dict[int, str]:
    return {i: name for i, name in s.execute(select(NodeRow.id, NodeRow.name))}  # type: ignore[attr-defined]


def test_gpus_taken_and_freed_reach_the_next_read_with_nothing_else_of_the_job_written(database: Database) -> None:
    """A gang's part that exits frees its node's GPUs without writing the job's row: the read still sees it."""
    node, first, second, _ = _seed(database)
    rows = JobRows(COLUMNS)
    with database.write() as s:
        s.execute(table(AllocationRow).insert(), [{"job_id": first, "node_id": node, "gpu_index": g} for g in (2, 0)])
    _read(database, rows)
    assert rows.held == {first: (Placement("gpu-01", (0, 2)),)}
    kept = rows.running[second]
    with database.write() as s:
        s.execute(delete(AllocationRow).where(AllocationRow.job_id == first, AllocationRow.gpu_index == 2))
        s.execute(table(AllocationRow).insert().values(job_id=second, node_id=node, gpu_index=None))
    _read(database, rows)
    assert rows.held == {first: (Placement("gpu-01", (0,)),), second: (Placement("gpu-01", ()),)}
    assert rows.running[second] is not kept  # its row counts as written
    with database.write() as s:
        s.execute(delete(AllocationRow))
    _read(database, rows)
    assert rows.held == {}
