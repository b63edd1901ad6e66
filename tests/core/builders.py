"""Builders that keep core table tests short: nodes, jobs, running jobs, snapshots."""

from __future__ import annotations

from nanum.core import Gpu, Job, JobId, Lab, Limits, Node, Placement, Running, Snapshot


def node(name: str = "n0", gpus: int = 4, model: str = "A100", islands: int = 1, **kw: object) -> Node:
    per = max(gpus // islands, 1)
    return Node(name=name, gpus=tuple(Gpu(i, model, 81920, i // per) for i in range(gpus)), **kw)  # type: ignore[arg-type]


def nodes(count: int, gpus: int = 4, model: str = "A100", prefix: str = "n", **kw: object) -> tuple[Node, ...]:
    return tuple(node(f"{prefix}{i}", gpus, model, **kw) for i in range(count))


def job(id: int, gpus: int = 1, lab: str = "lab", user: str = "u", submit: float | None = None, **kw: object) -> Job:
    return Job(id=JobId(id), user=user, lab=lab, gpus=gpus, submit_time=float(id if submit is None else submit), **kw)  # type: ignore[arg-type]


def running(j: Job, where: dict[str, tuple[int, ...]], start: float = 0.0, end: float | None = None,
            borrowing: bool = False, checkpoint: float | None = None, over_reservation: bool = False) -> Running:
    return Running(job=j, placements=tuple(Placement(n, g) for n, g in where.items()), start_time=start,
                   expected_end=end, borrowing=borrowing, last_checkpoint=checkpoint, over_reservation=over_reservation)


def lab(name: str, guaranteed: int | None = None, **limits: object) -> Lab:
    return Lab(name=name, guaranteed_gpus=guaranteed, limits=Limits(**limits))  # type: ignore[arg-type]


def snap(nodes: tuple[Node, ...], pending: tuple[Job, ...] = (), running: tuple[Running, ...] = (),
         now: float = 100.0, labs: tuple[Lab, ...] = (), **kw: object) -> Snapshot:
    return Snapshot(now=now, nodes=nodes, pending=pending, running=running, labs={x.name: x for x in labs}, **kw)  # type: ignore[arg-type]
