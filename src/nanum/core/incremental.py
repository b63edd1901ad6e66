"""Incremental scheduling: the object a driver keeps from cycle to cycle, and the rule for when a cycle may act.

A driver (the simulator at every event, the server at every tick) tells `Incremental` what happened —
`observe(arrived=..., started=..., stopped=..., checkpointed=...)` — asks `due(now)` whether a cycle could start
or preempt anything, and if so runs `cycle(snapshot)` with the snapshot built from `pending()` and `running()`.
The drivers differ only in clock, snapshot source and applier; none decides on its own when a cycle may act.

`due(now)` is False only when a cycle provably decides nothing:

1. nothing changed since the last cycle (no arrival, no stop, no `touch`), or nothing is pending;
2. no partition is live. A partition (the whole cluster when owners lend, else a lab's own nodes and the shared
   ones) is live when one of its labs has a pending job that
   a. might fit now: its smallest job in the free GPUs the lab may use, its narrowest in the largest free block;
   b. could reclaim: the lab is under its guarantee by that job while others borrow (`reclaim`);
   c. (with `+preempt`) outranks a running job it may preempt: a lower class among its own lab's jobs or the
      borrowers;
   d. (with `+preempt`) could take back GPUs from a job backfilled over its reservation there.

Without `+preempt` the cluster-wide form of (a) and (b) decides, and partitions are narrowed only when labs keep to
their own nodes. When labs keep to their own nodes and no one plans on shared GPUs, `pending()` shows a cycle only
the jobs of live partitions: the others would only get reasons. So `explain=True` drivers (the server) see all.

Checkpoints reach the core only in a cycle that chose victims (`Decisions.ranked`): a checkpoint only ranks them.
The ranking still decides which victims a job would take, and so, for a job that would still borrow once its own
lab's victims have stopped (it then takes only borrowers), whether it preempts at all. Such a cycle is decided again
with the running jobs' latest checkpoints (`cycle`).

The decisions are exactly those of a cycle at every change with every pending job and checkpoint (`skip=False`,
which the tests compare against).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from itertools import chain
from typing import cast

from nanum.core.cache import CycleCache
from nanum.core.decision import Decisions
from nanum.core.model import Job, JobId, Lab, Node, Running, Snapshot
from nanum.core.policy import Policy
from nanum.core.predict import Predictor
from nanum.core.preempt import ClassOrder
from nanum.core.scheduler import partition_of, schedule
from nanum.core.tallies import Capacity, Classes, count, counts_of

#: A source of checkpoints taken by a time: (job, when it last saved its state) for the runs that saved since asked.
Checkpoints = Callable[[float], Iterable[tuple[JobId, float]]]


class Incremental:
    """Carries a driver's scheduling state between cycles; see the module docstring for the contract.

    `checkpoints`, when given, is asked for checkpoints only by a cycle that preempts (a driver that can list
    them cheaply only on demand, like the simulator); `observe(checkpointed=...)` is the eager form."""

    def __init__(self, policy: Policy, predictor: Predictor | None, nodes: tuple[Node, ...],
                 labs: Mapping[str, Lab], *, explain: bool = False, checkpoints: Checkpoints | None = None) -> None:
        self.policy, self.predictor, self.labs = policy, predictor, labs
        self.cache = CycleCache()
        #: skip cycles and partitions that decide nothing, and checkpoints until a cycle preempts (off: a cycle at
        #: every change, shown every pending job and checkpoint; the same decisions).
        self.skip = True
        #: whether a cycle writes the pending jobs' reasons and estimates (`schedule`'s `explain`). A driver made
        #: with `explain=True` may leave them out of some cycles; it is still shown every pending job.
        self.explain = explain
        #: the seam to the core: one cycle for one snapshot (tests wrap it to compare with a cache-less cycle).
        self.decide: Callable[[Snapshot], Decisions] = lambda snap: schedule(
            snap, policy, predictor, self.cache, explain=self.explain)
        self._source = checkpoints
        self._saved: dict[JobId, float] = {}
        self.pending: dict[JobId, Job] = {}
        self.running: dict[JobId, Running] = {}
        self.changed = False
        self._explain = explain
        self._nodes(nodes)
        self._seen_nodes = nodes
        self._untold: set[int] = set()  # running objects of ours the cache never saw (`applied`)
        self._queues: dict[str | None, dict[JobId, Job]] = {}
        self._sizes: dict[str, Counter[int]] = {}  # per lab, pending jobs by GPUs in all
        self._widths: dict[str, Counter[int]] = {}  # per lab, pending jobs by GPUs per node
        self._lab_used: Counter[str] = Counter()
        self._borrowers = 0
        self._over: Counter[str | None] = Counter()  # per partition, running jobs started over a reservation
        self._show: set[str | None] | None = None
        self._classes = Classes(cast(ClassOrder, policy.make_order())) if policy.preempt else None

    # -- what the driver tells -----------------------------------------------------------------------------------

    def observe(self, *, arrived: Iterable[Job] = (), started: Iterable[Running] = (),
                stopped: Iterable[JobId] = (), checkpointed: Iterable[tuple[JobId, float]] = ()) -> None:
        """Jobs that `arrived` in the queue (new, or requeued after a stop), pending jobs that `started` (as the
        `Running` the driver passes in snapshots from now on), running jobs that `stopped`, and runs that saved
        their state (job, when)."""
        for job in arrived:
            self._enqueue(job)
        for run in started:
            self._start(run)
        for job_id in stopped:
            self._stop(job_id)
        self._saved.update(checkpointed)

    def _nodes(self, nodes: tuple[Node, ...]) -> None:
        policy = self.policy
        self._capacity = Capacity(nodes, policy.lend)
        owners = {n.owner for n in nodes if n.owner is not None}
        parts: dict[str, str | None] = {}

        def part(lab: str) -> str | None:
            if lab not in parts:
                parts[lab] = partition_of(lab, policy.lend, owners)
            return parts[lab]

        self._part: Callable[[str], str | None] = part
        #: partitions may be left out: they share no GPUs, or no one plans on the shared ones (estimate depth 1).
        self._prune = not self._explain and not policy.lend and (
            policy.estimate_depth == 1 or not self._capacity.pool_free[None])

    def sync(self, snapshot: Snapshot) -> None:
        """Catch up with `snapshot`, for a driver that reads the whole cluster at every tick (the server) rather
        than observing each event: what differs from what this object holds is observed (a running job or a
        pending job whose value changed counts as gone and back), so a tick costs what changed, and the cycle's
        cache is told exactly that. Nodes that changed start the counts over. Then `due`, `cycle`, and `applied`.
        The snapshot must reuse the objects of jobs, runs and nodes that did not change (the server's
        `SnapshotCache` does): a new object is a change."""
        if snapshot.nodes != self._seen_nodes:
            self._rebuild(snapshot)
            return
        self.labs = snapshot.labs
        running = {run.job.id: run for run in snapshot.running}
        pending = {job.id: job for job in snapshot.pending}
        untold = self._untold
        for job_id in [k for k, run in self.running.items() if running.get(k) is not run]:
            self._stop(job_id, tell=id(self.running[job_id]) not in untold)
        untold.clear()
        for job_id in [k for k, job in self.pending.items() if pending.get(k) is not job]:
            self._dequeue(job_id)
        for job_id, run in running.items():
            if job_id not in self.running:
                self._enqueue(run.job)
                self._start(run)
        for job_id, job in pending.items():
            if job_id not in self.pending:
                self._enqueue(job)

    def _rebuild(self, snapshot: Snapshot) -> None:
        self._seen_nodes = snapshot.nodes
        self._untold.clear()
        self.pending, self.running, self._saved = {}, {}, {}
        self._nodes(snapshot.nodes)
        self._queues, self._sizes, self._widths = {}, {}, {}
        self._lab_used, self._borrowers, self._over = Counter(), 0, Counter()
        self.labs = snapshot.labs
        self._classes = Classes(self._classes.classes) if self._classes is not None else None
        for run in snapshot.running:
            self._enqueue(run.job)
            self._start(run, tell=False)
        for job in snapshot.pending:
            self._enqueue(job)

    def applied(self, snapshot: Snapshot, decisions: Decisions) -> None:
        """The driver applied `decisions` (made on `snapshot`): its starts run from now on."""
        for start in decisions.starts:
            job = self.pending.get(start.job_id)
            if job is not None:
                run = Running(job=job, placements=start.placements, start_time=snapshot.now,
                              expected_end=start.expected_end, borrowing=start.borrowing,
                              over_reservation=start.over_reservation)
                self._start(run, tell=False)  # the cache undoes its cycle's own starts; the next snapshot has
                self._untold.add(id(run))  # these as new runs, and this object was never the cache's to forget

    def free_gpus(self) -> int:
        """GPUs on up nodes that no job holds and nothing else uses, as observed: a job that arrives now can start
        at once only if there is one (or by reclaim or preemption, which a driver's periodic cycle finds)."""
        return sum(self._capacity.pool_free.values())

    def touch(self) -> None:
        """Something besides jobs changed (a budget period began, a limit or a node changed): cycle again."""
        self.changed = True

    # -- when a cycle may act ------------------------------------------------------------------------------------

    def due(self, now: float) -> bool:
        """Whether a cycle at `now` could start or preempt anything; picks the jobs `pending_shown` gives it."""
        self._show = None
        if not self.changed or not self.pending:
            return False
        if not self.skip:
            return True
        if self._classes is not None:
            live = self._live(now)
            if not live:
                # With jobs running, such a cycle would have run and found nothing: clear `changed` as it would.
                self.changed = self.changed and not self.running
                return False
        elif not self._fits_anywhere() and not self._may_reclaim():
            return False
        else:
            live = self._live(now) if self._prune else set()
        if self._prune:
            self._show = live
        return True

    def pending_shown(self) -> tuple[Job, ...]:
        """The pending jobs the next cycle must see: all, or those of the partitions `due` found live."""
        if self._show is None:
            return tuple(self.pending.values())
        show = self._show
        return tuple(chain.from_iterable(q.values() for part, q in self._queues.items() if part in show))

    # -- one cycle -----------------------------------------------------------------------------------------------

    def cycle(self, snapshot: Snapshot) -> Decisions:
        """Decide `snapshot` (its running jobs must be `running`, its pending jobs `pending_shown()`). A cycle
        that chose victims is decided again with the latest checkpoints, so victims are those losing the least work
        (and whether there are any is as the latest checkpoints have it)."""
        self.changed = False
        if not self.skip:
            snapshot = self._with_checkpoints(snapshot)
        self.cache.expect()  # every start and stop since the last cycle was observed as it happened
        decisions = self.decide(snapshot)
        if (decisions.preemptions or decisions.ranked) and self.skip:
            again = self._with_checkpoints(snapshot)
            if again is not snapshot:
                decisions = self.decide(again)
        return decisions

    def _with_checkpoints(self, snapshot: Snapshot) -> Snapshot:
        if self._source is not None:
            self._saved.update(self._source(snapshot.now))
        came, gone = [], []
        for job_id, when in self._saved.items():
            run = self.running.get(job_id)
            if run is not None:
                gone.append(run)
                self.running[job_id] = replace(run, last_checkpoint=when)
                came.append(self.running[job_id])
        self._saved.clear()
        if not came:
            return snapshot
        self.cache.expect(came=came, gone=gone)
        return replace(snapshot, running=tuple(self.running.values()))

    # -- the rule's parts ----------------------------------------------------------------------------------------

    def _live(self, now: float) -> set[str | None]:
        """The partitions where a pending job could start, reclaim, preempt or take back (module docstring, 2)."""
        if self._classes is not None:
            self._classes.update(now)
        live: set[str | None] = set()
        for lab, sizes in self._sizes.items():
            part = self._part(lab)
            if not sizes or part in live:
                continue
            smallest = min(sizes)
            if (self._fits(lab, smallest) or self._reclaims(lab, smallest) or self._outranks(lab)
                    or self._over[part]):
                live.add(part)
        return live

    def _fits(self, lab: str, smallest: int) -> bool:
        cap = self._capacity
        return smallest <= cap.free_for(lab) and min(self._widths[lab]) <= cap.block_for(lab)

    def _fits_anywhere(self) -> bool:
        cap = self._capacity
        return any(sizes and min(sizes) <= cap.free_for(lab) for lab, sizes in self._sizes.items())

    def _reclaims(self, lab: str, smallest: int) -> bool:
        guarantee = self.labs[lab].guaranteed_gpus if lab in self.labs else None
        return (self.policy.reclaim and self._borrowers > 0 and guarantee is not None
                and self._lab_used[lab] + smallest <= guarantee)

    def _may_reclaim(self) -> bool:
        if not (self.policy.lend and self.policy.reclaim and self._borrowers):
            return False
        return any(sizes and self._reclaims(lab, min(sizes)) for lab, sizes in self._sizes.items())

    def _outranks(self, lab: str) -> bool:
        return self._classes is not None and self._classes.outranks(lab)

    # -- keeping the counts ----------------------------------------------------------------------------------------

    def _enqueue(self, job: Job) -> None:
        self.pending[job.id] = job
        self._queues.setdefault(self._part(job.lab), {})[job.id] = job
        count(counts_of(self._sizes, job.lab), job.total_gpus, +1)
        count(counts_of(self._widths, job.lab), job.gpus, +1)
        if self._classes is not None:
            self._classes.queue(job, +1)
        self.changed = True

    def _start(self, run: Running, tell: bool = True) -> None:
        job = self.pending.pop(run.job.id)
        del self._queues[self._part(job.lab)][job.id]
        count(self._sizes[job.lab], job.total_gpus, -1)
        count(self._widths[job.lab], job.gpus, -1)
        self.running[job.id] = run
        if tell:  # the cache diffs a rebased driver's snapshots itself
            self.cache.expect(came=(run,))
        self._capacity.hand(run, -1)
        self._account(run, +1)
        if self._classes is not None:
            self._classes.queue(job, -1)
            self._classes.start(run)

    def _dequeue(self, job_id: JobId) -> None:
        """A pending job leaves the queue without starting (cancelled, held, changed)."""
        job = self.pending.pop(job_id, None)
        if job is None:
            return
        del self._queues[self._part(job.lab)][job_id]
        count(self._sizes[job.lab], job.total_gpus, -1)
        count(self._widths[job.lab], job.gpus, -1)
        if self._classes is not None:
            self._classes.queue(job, -1)

    def _stop(self, job_id: JobId, tell: bool = True) -> None:
        run = self.running.pop(job_id)
        self._saved.pop(job_id, None)
        if tell:
            self.cache.expect(gone=(run,))
        self._capacity.hand(run, +1)
        self._account(run, -1)
        if self._classes is not None:
            self._classes.stop(run)
        self.changed = True

    def _account(self, run: Running, sign: int) -> None:
        self._lab_used[run.job.lab] += sign * run.job.total_gpus
        self._borrowers += sign if run.borrowing else 0
        if run.over_reservation:
            self._over[self._part(run.job.lab)] += sign
