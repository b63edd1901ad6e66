"""CycleCache: carry a cycle's working state to the next cycle, so a driver pays for what changed, not for the cluster.

A driver that calls `schedule` at every event (the simulator, at every arrival and completion) would otherwise
rebuild the free-capacity index of every node, the per-lab usage and the running jobs' expected ends each time:
O(nodes + running jobs) per cycle, even when one job arrived. With a cache, `schedule(snapshot, policy,
predictor, cache)` instead

1. undoes the GPUs the previous cycle took for its own starts (a journal of `take`/`release`),
2. diffs the running jobs against those of the previous call by object identity — a job still running must be
   passed as the same `Running` object — releasing the ones that left and taking the ones that came,
3. puts every bucket it touched back in node order, so placement scans exactly as after a fresh build.

The diff in step 2 compares every running job. A driver that knows what changed (the simulator, which starts and
stops the jobs itself) may say so with `expect`, and step 2 then costs only the changes.

With `+preempt` it also carries the running jobs' priority classes and victim ranking (`RunClasses`), updated by the
same diff, and always the running members of each burst (`Siblings`, for the `gittins` order).

The decisions are exactly those `schedule` returns without a cache (the tests compare both on every cycle of a
simulation). The cache holds while the driver passes the very same `nodes` tuple; a new tuple (a node added, down,
or relabelled), or a running set that disagrees with the free GPUs (a GPU taken twice), rebuilds from scratch.
One cache per driver; it is not for concurrent cycles.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable

from nanum.core.backfill import Event, Key
from nanum.core.bursts import Siblings
from nanum.core.classes import RunClasses
from nanum.core.model import JobId, Node, Running, Snapshot
from nanum.core.preempt import ClassOrder
from nanum.core.quota import Admission, Usage
from nanum.core.state import ClusterState

INF = float("inf")


def run_ends(run: Running, state: ClusterState, floor: float = -INF) -> list[Event]:
    """(expected end, node index, GPUs freed, why) for each node of a running job; none when its end is unknown.
    An end before `floor` is given as `floor`."""
    end = run.expected_end
    if end is None:
        return []
    job = run.job
    limit = job.time_limit
    if limit is not None and abs(run.start_time + limit - end) < 1.0:
        why = f"job {job.ref} reaches its time limit"
    else:
        why = f"job {job.ref} is expected to end"
    end = max(end, floor)
    out: list[Event] = []
    for p in run.placements:  # a loop, not a comprehension: this runs for every running job of a fresh cycle
        nf = state.by_name.get(p.node)
        if nf is not None:
            out.append((end, nf.index, len(p.gpus), why))
    return out


class CycleCache:
    """State carried between the cycles of one driver. See the module docstring for the contract."""

    def __init__(self) -> None:
        self._nodes: tuple[Node, ...] | None = None
        self._state: ClusterState | None = None
        self._applied: dict[int, Running] = {}
        self._usage = Usage()
        self._ends: dict[int, list[Event]] = {}
        #: the running jobs' expected ends per bucket of nodes (`NodeFree.key`), sorted.
        self.ends: dict[Key, list[Event]] = {}
        self.total_gpus = 0
        self.owners: set[str] = set()
        self.rebuilds = 0
        self.reuses = 0
        self._classes: dict[type, RunClasses] = {}
        #: the running members of each burst, kept by the same diff.
        self.siblings = Siblings()
        #: the running jobs started over a reservation, by job, kept by the same diff.
        self.over: dict[JobId, Running] = {}
        self._now = float("-inf")
        self._came: dict[int, Running] | None = None  # what `expect` was told since the last `prepare`
        self._gone: dict[int, Running] = {}
        self._admission: tuple[object, object, str, Admission] | None = None

    def prepare(self, snapshot: Snapshot) -> tuple[ClusterState, Usage]:
        """The cycle state and usage for `snapshot`, as `ClusterState.build` and `Usage.of` would give them."""
        state = self._state
        if (state is None or self._nodes is not snapshot.nodes or snapshot.now < self._now
                or not self._catch_up(state, snapshot)):
            state = self._rebuild(snapshot)
        else:
            self.reuses += 1
        self._came, self._gone = None, {}
        self._now = snapshot.now
        state.journal = []
        usage = self._usage
        return state, Usage(Counter(usage.lab_gpus), Counter(usage.lab_jobs), Counter(usage.user_gpus),
                            Counter(usage.user_jobs))

    def admission(self, snapshot: Snapshot) -> Admission:
        """`Admission.of(snapshot)`, remembered while the driver passes the same labs and users mappings (the
        simulator does between its usage readings) and the same month."""
        held = self._admission
        if (held is None or held[0] is not snapshot.labs or held[1] is not snapshot.users
                or held[2] != snapshot.month):
            held = self._admission = (snapshot.labs, snapshot.users, snapshot.month, Admission.of(snapshot))
        return held[3]

    def expect(self, came: Iterable[Running] = (), gone: Iterable[Running] = ()) -> None:
        """Tell the next `prepare` which running jobs came and which went since the snapshot it was last given,
        so that it applies just those instead of comparing the running sets (a run passed as a new object, say
        after a checkpoint, went and came). Calls add up until that `prepare`; a run that came and then went in
        between is neither.

        The driver vouches that nothing else changed. `prepare` checks only that the runs that went were there,
        that those that came were not, and that the numbers of running jobs add up; else it compares the sets."""
        if self._came is None:
            self._came = {}
        for run in came:
            self._came[id(run)] = run
        for run in gone:
            if self._came.pop(id(run), None) is None:
                self._gone[id(run)] = run

    def run_classes(self, classes: ClassOrder, snapshot: Snapshot) -> RunClasses:
        """The running jobs' classes under `classes` at the snapshot `prepare` was last given."""
        held = self._classes.get(type(classes))
        if held is None:
            held = self._classes[type(classes)] = RunClasses.of(classes, snapshot.running, snapshot.now)
        return held

    def ends_of(self, run: Running) -> list[Event]:
        """The expected ends `run` adds to `ends` (it must be running at the snapshot `prepare` was last given)."""
        return self._ends.get(id(run), [])

    # -- keeping the carried state current -----------------------------------------------------------------------

    def _rebuild(self, snapshot: Snapshot) -> ClusterState:
        self.rebuilds += 1
        nodes = snapshot.nodes
        state = ClusterState.build(nodes, snapshot.running)
        self._nodes, self._state = nodes, state
        self.total_gpus = sum(len(n.gpus) for n in nodes)
        self.owners = {n.owner for n in nodes if n.owner is not None}
        self._applied = dict(zip(map(id, snapshot.running), snapshot.running, strict=True))
        self._usage = Usage.of(snapshot.running)
        self._ends = {key: run_ends(r, state) for key, r in self._applied.items()}
        self.ends = {}
        for ends in self._ends.values():
            for e in ends:
                self.ends.setdefault(state.nodes[e[1]].key, []).append(e)
        for events in self.ends.values():
            events.sort()
        self._classes = {}
        self.siblings = Siblings.of(snapshot.running)
        self.over = {r.job.id: r for r in snapshot.running if r.over_reservation}
        return state

    def _catch_up(self, state: ClusterState, snapshot: Snapshot) -> bool:
        """Undo the last cycle and apply the running-set diff; False when a rebuild is needed instead."""
        journal, state.journal = state.journal or [], None
        state.touched = set()
        for took, placement, job in reversed(journal):
            (state.release if took else state.take)(placement, job)
        arrived, left = self._told(len(snapshot.running)) or self._compare(snapshot.running)
        gone = {run.job.id: run for run in left}
        came, moved = [], []
        for run in arrived:
            old = gone.get(run.job.id)
            if old is not None and _same_allocation(old, run):
                del gone[run.job.id]  # a new object for the same run (a later checkpoint): nothing moves
                self._ends[id(run)] = self._ends.pop(id(old))
                if run.over_reservation:
                    self.over[run.job.id] = run  # victims are ranked by its checkpoint
                moved.append((old, run))
            else:
                came.append(run)
        for run in gone.values():  # the order does not matter: buckets are re-sorted below
            if not self._release(state, run):
                return False
        for run in came:
            if not self._take(state, run):
                return False
        state.canonical()
        for held in self._classes.values():
            held.update(snapshot.now, came, gone.values(), moved)
        return True

    def _compare(self, running: tuple[Running, ...]) -> tuple[list[Running], list[Running]]:
        """The runs that came and went since the last snapshot, by comparing the two sets; records the new one."""
        current = dict(zip(map(id, running), running, strict=True))
        applied = self._applied
        changed = current.keys() ^ applied.keys()  # one pass over both: most runs are still running
        self._applied = current
        return [current[key] for key in changed if key in current], [applied[key] for key in changed if key in applied]

    def _told(self, count: int) -> tuple[list[Running], list[Running]] | None:
        """The runs that came and went as `expect` was told, when the numbers add up to `count`; records the
        new set. None when nothing was told or the numbers do not add up."""
        came, gone, applied = self._came, self._gone, self._applied
        if (came is None or len(applied) - len(gone) + len(came) != count or not gone.keys() <= applied.keys()
                or not came.keys().isdisjoint(applied.keys())):
            return None
        for key in gone:
            del applied[key]
        applied.update(came)
        return list(came.values()), list(gone.values())

    def _release(self, state: ClusterState, run: Running) -> bool:
        for p in run.placements:
            nf = state.by_name.get(p.node)
            if nf is not None and not nf.free.isdisjoint(p.gpus):
                return False
            state.release(p, run.job)
        self._usage.add(run.job, -1)
        self.siblings.remove(run)
        if self.over.get(run.job.id) is run:
            del self.over[run.job.id]
        for e in self._ends.pop(id(run), ()):
            events = self.ends[state.nodes[e[1]].key]
            del events[bisect.bisect_left(events, e)]
        return True

    def _take(self, state: ClusterState, run: Running) -> bool:
        for p in run.placements:
            nf = state.by_name.get(p.node)
            if nf is None:
                continue
            if not nf.free.issuperset(p.gpus):
                return False
            state.take(p, run.job)
        self._usage.add(run.job)
        self.siblings.add(run)
        if run.over_reservation:
            self.over[run.job.id] = run
        ends = self._ends[id(run)] = run_ends(run, state)
        for e in ends:
            bisect.insort(self.ends.setdefault(state.nodes[e[1]].key, []), e)
        return True


def _same_allocation(old: Running, new: Running) -> bool:
    """Whether `new` holds exactly what `old` held, with the same expected end (only, say, its checkpoint moved)."""
    return (old.placements == new.placements and old.expected_end == new.expected_end
            and old.start_time == new.start_time and old.job == new.job)
