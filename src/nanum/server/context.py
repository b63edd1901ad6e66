"""The server's shared objects: settings, database, wake-up signals, the scheduler, small read caches, and the
nodes' last-heard times waiting to be written.

The caches hold what every request would otherwise read again: callers by token hash, the node inventory used to
refuse impossible requests, and lab limits. Entries live a few seconds (several servers may share a database) and
are dropped at once when this server changes what they hold.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from nanum.core import Node, Policy, Prediction
from nanum.protocol import JobLaunch
from nanum.server.lastseen import LastSeen
from nanum.server.settings import ServerSettings
from nanum.server.signals import Signals
from nanum.store import Database

#: the GPUs the jobs on a node hold, by job, sorted: what a node's cached desired jobs were built for.
HeldGpus = tuple[tuple[int, tuple[int, ...]], ...]
#: A whole-cluster read that took this much CPU or more to build (seconds) is shared for `SHARE_FOR_S`
#: (`Caches.shared`).
SHARE_AFTER_S = 0.05
#: How long a shared read serves: GPU readings are written about once a second, so a read this old shows what a
#: fresh one would, but for a job that started or ended within the second.
SHARE_FOR_S = 1.0
K = TypeVar("K")
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """A thread-safe map whose entries expire `ttl` seconds after they were stored. `get_or_load` loads a missing or
    expired entry once however many threads ask for it at the same time."""

    def __init__(self, ttl: float, maxsize: int = 10_000) -> None:
        self.ttl, self.maxsize = ttl, maxsize
        self._items: dict[K, tuple[float, V]] = {}
        self._lock = threading.Lock()
        self._loading: dict[K, threading.Lock] = {}

    def get(self, key: K) -> V | None:
        item = self._items.get(key)
        if item is None or item[0] < time.monotonic():
            return None
        return item[1]

    def get_or_load(self, key: K, load: Callable[[], V], keep: Callable[[float], float] | None = None) -> V:
        """The entry, loaded if missing or expired. While one thread loads an expired entry, the others are given
        the expired value; where there is none (never loaded, or cleared), they wait for the load. (At 1,000
        nodes, ten submissions at once each reading the whole fleet when its entry expired took a sixth of the
        server's time.) `keep`: how long to keep the value, given the CPU seconds its load took (the loading
        thread's: on a busy machine, its wall time says more of the machine than of the load; default: `ttl`)."""
        item = self._items.get(key)
        if item is not None and item[0] >= time.monotonic():
            return item[1]
        with self._lock:
            loading = self._loading.get(key)
            mine = loading is None
            if mine:
                loading = self._loading[key] = threading.Lock()
                loading.acquire()
        assert loading is not None
        if not mine:
            if item is not None:
                return item[1]
            with loading:  # released once the value is in
                pass
            value = self.get(key)
            return value if value is not None else self.get_or_load(key, load)
        try:
            began = time.thread_time()
            value = load()
            self.put(key, value, None if keep is None else keep(time.thread_time() - began))
            return value
        finally:
            with self._lock:
                del self._loading[key]
            loading.release()

    def put(self, key: K, value: V, ttl: float | None = None) -> None:
        """Store `value`, kept `ttl` seconds (default: the cache's)."""
        with self._lock:
            if len(self._items) >= self.maxsize:
                self._items.clear()
            self._items[key] = (time.monotonic() + (self.ttl if ttl is None else ttl), value)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


@dataclass(slots=True)
class Caches:
    callers: TtlCache[str, object] = field(default_factory=lambda: TtlCache(10.0))
    #: node tokens: a minute, since a fleet's every heartbeat needs one (this server forgets one at once when the
    #: node is removed or given a new token; another server sharing the database, within the minute)
    node_tokens: TtlCache[str, object] = field(default_factory=lambda: TtlCache(60.0))
    nodes: TtlCache[str, object] = field(default_factory=lambda: TtlCache(5.0))
    #: the core nodes `nodes` was last loaded with, by name, each with the row it was made from: a reload makes new
    #: ones only for the rows that changed (`nanum.server.services.catalog`)
    node_objects: dict[str, tuple[tuple[Any, ...], Node]] = field(default_factory=dict)
    labs: TtlCache[str, object] = field(default_factory=lambda: TtlCache(5.0))
    budgets: TtlCache[str, object] = field(default_factory=lambda: TtlCache(3.0))
    #: each node's desired jobs as last sent, by node id, with the node's desired version and the GPUs its jobs
    #: held then: a quiet heartbeat whose node still has both is answered with them (`services.agent`). Forgotten
    #: when labs change (a lab's grace is in each launch); another server's lab change shows within 5 s.
    desired: TtlCache[int, tuple[int, HeldGpus, list[JobLaunch]]] = field(default_factory=lambda: TtlCache(5.0))
    #: each node's last quiet heartbeat and its answer, by node id (`services.agent.QuietAnswer`), kept up to a
    #: lease: a lab change on another server reaches a node answered from it within that lease
    quiet: dict[int, Any] = field(default_factory=dict)
    #: the paths every agent is asked to look for (`services.environments.check_paths`): every heartbeat sends
    #: them. Forgotten at once when this server adds an environment or dataset.
    paths: TtlCache[str, list[str]] = field(default_factory=lambda: TtlCache(5.0))
    #: the memory (MiB) of each GPU model some node has (`services.history.cluster_models`), read again each minute:
    #: finished jobs' summaries name the smallest that would have held them
    models: TtlCache[str, dict[str, int]] = field(default_factory=lambda: TtlCache(60.0))
    #: what the dashboard's pages, their live data and `/metrics` read of the whole cluster, by name (`shared`)
    views: TtlCache[str, Any] = field(default_factory=lambda: TtlCache(0.0))
    #: by user id, how many more jobs the user may submit here before theirs are counted again
    #: (`services.jobs._refuse_over_cap`)
    room: dict[int, int] = field(default_factory=dict)

    def shared(self, name: str, build: Callable[[], V]) -> V:
        """What `build` reads, shared by every request of the next `SHARE_FOR_S` seconds where building it took
        `SHARE_AFTER_S` of CPU or more: at 1,000 nodes × 8 GPUs the cluster view takes about 0.2 s of CPU, and each open
        Cluster page asks for it every 2.5 s (ten open pages took a whole core). A small cluster's, built in
        milliseconds, is built anew for every request."""
        return self.views.get_or_load(  # type: ignore[no-any-return]
            name, build, keep=lambda seconds: SHARE_FOR_S if seconds >= SHARE_AFTER_S else 0.0)

    def forget_labs(self) -> None:
        """A lab was created or changed: forget what was read of labs, and the launches that carry their grace."""
        self.labs.clear()
        self.desired.clear()
        self.quiet.clear()


@dataclass(slots=True)
class ServerContext:
    settings: ServerSettings
    db: Database
    policy: Policy
    signals: Signals = field(default_factory=Signals)
    caches: Caches = field(default_factory=Caches)
    #: when each node was last heard from, for the heartbeats whose `last_seen` is written in batches
    last_seen: LastSeen = field(default_factory=LastSeen)
    started: float = field(default_factory=time.time)
    #: what services take the time from (tests move it instead of sleeping)
    clock: Callable[[], float] = time.time
    #: each pending job's place in its partition's queue after the last scheduling tick (1: next in line), as its
    #: reason says it: `nanum priority` shows the same.
    places: dict[int, int] = field(default_factory=dict)
    #: each pending and running job's run-time prediction and its basis after the last scheduling tick
    #: (`nanum.core.HistoryPredictor.explain`), for the API's job view.
    predictions: dict[int, Prediction] = field(default_factory=dict)

    @classmethod
    def create(cls, settings: ServerSettings, db: Database | None = None) -> ServerContext:
        policy = Policy.parse(settings.policy, estimate_depth=settings.estimate_depth)
        return cls(settings=settings, db=db or Database(settings.database_url), policy=policy)
