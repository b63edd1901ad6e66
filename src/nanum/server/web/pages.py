"""The dashboard's overview pages: Cluster (live grid of every GPU), Queue, Nodes and Labs, and their JSON."""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from nanum.jobref import job_ref
from nanum.server.callers import Caller
from nanum.server.context import ServerContext
from nanum.server.services.cluster import ClusterView, GpuView, NodeView, Totals, shared
from nanum.server.web import charts, data
from nanum.server.web.render import ago, duration, page
from nanum.server.web.session import caller

router = APIRouter(include_in_schema=False)
WebCaller = Annotated[Caller, Depends(caller)]

STATE_WORDS = {"busy": "in use", "idle": "idle", "free": "free", "rogue": "outside nanum", "drained": "drained",
               "down": "down"}


def tile(node: NodeView, g: GpuView, now: float) -> dict[str, Any]:
    """One GPU as the grid draws it: its classes (state, utilisation band) and its three lines of text."""
    band = "" if g.util is None else f" u{min(int(g.util // 10), 9)}"
    who, href = "", None
    if g.job_id is not None:
        who, href = f"#{g.job_ref} {g.user}", f"/jobs/{g.job_id}"
    elif g.state == "rogue":
        first = g.strangers[0] if g.strangers else {}
        who = f"pid {first.get('pid', '?')}" + (f" {first['user']}" if first.get("user") else "")
    label = "outside" if g.state == "rogue" else STATE_WORDS[g.state]
    if g.state == "idle" and g.idle_since is not None:
        label = f"idle {duration(now - g.idle_since)}" + (" ⚑" if g.idle_stage == "flagged" else "")
    memory = "" if g.memory_used_mb is None else f"{g.memory_used_mb / 1024:.0f}/{g.memory_mb / 1024:.0f} GiB"
    return {
        "key": f"{node.name}:{g.index}",
        "index": g.index,
        "cls": f"gpu {g.state}{band}" + (" flagged" if g.idle_stage == "flagged" and g.job_id else ""),
        "util": "–" if g.util is None else f"{g.util:.0f}%",
        "label": label,
        "who": who,
        "memory": memory,
        "href": href,
        "title": _title(node, g),
    }


def _title(node: NodeView, g: GpuView) -> str:
    parts = [f"{node.name} GPU {g.index} ({g.model})", STATE_WORDS[g.state]]
    if g.job_id is not None:
        parts.append(f"job {g.job_ref} {g.job_name} of {g.user} ({g.lab})")
    if g.temperature_c is not None:
        parts.append(f"{g.temperature_c:.0f} °C, {g.power_w or 0:.0f} W")
    parts += [f"process {p.get('pid')} of {p.get('user') or '?'}: {p.get('command') or ''}" for p in g.strangers]
    return " · ".join(parts)


def cluster_json(view: ClusterView) -> dict[str, Any]:
    return {
        "time": view.time,
        "totals": {k: getattr(view.totals, k) for k in ("total", *Totals.STATES)},
        "nodes": [
            {"name": n.name, "state": n.state, "tiles": [tile(n, g, view.time) for g in n.gpus]} for n in view.nodes
        ],
    }


@router.get("/")
async def cluster_page(request: Request, who: WebCaller) -> Response:
    view = await run_in_threadpool(shared, request.app.state.ctx)
    return page(request, "cluster.html", who, title="Cluster", view=view, grid=cluster_json(view))


@router.get("/ui/cluster.json")
async def cluster_live(request: Request, _: WebCaller) -> Response:
    view = await run_in_threadpool(shared, request.app.state.ctx)
    return await _live(request, "cluster", view, lambda: cluster_json(view))


#: Live data of at least this many bytes goes gzipped to a browser that takes it: at 1,000 nodes × 8 GPUs the
#: Cluster page's is 1.9 MB (0.19 MB gzipped), asked for every 2.5 s by each open page.
GZIP_FROM = 16 * 1024


async def _live(request: Request, name: str, read: object, render: Callable[[], dict[str, Any]]) -> Response:
    """A live page's data, rendered (and gzipped) once for every request that `read`, a shared read
    (`Caches.shared`), serves: at 1,000 nodes rendering was a third of such a request's time. Only this data
    is compressed, not the pages: their forms carry a CSRF token, which compression beside text a request
    chose would let an observer of the traffic guess."""
    kept = getattr(request.app.state, "live", None)
    if kept is None:
        kept = request.app.state.live = {}
    if name not in kept or kept[name][0] is not read:
        kept[name] = (read, *await run_in_threadpool(_rendered, render))
    _, body, packed = kept[name]
    headers = {"Cache-Control": "no-store", "Vary": "Accept-Encoding"}
    if packed is not None and "gzip" in request.headers.get("accept-encoding", ""):
        return Response(packed, media_type="application/json", headers={**headers, "Content-Encoding": "gzip"})
    return Response(body, media_type="application/json", headers=headers)


def _rendered(render: Callable[[], dict[str, Any]]) -> tuple[bytes, bytes | None]:
    """The JSON `render` gives, and the same gzipped where it is large enough (`GZIP_FROM`)."""
    body = bytes(JSONResponse(render()).body)
    return body, gzip.compress(body, 5) if len(body) >= GZIP_FROM else None


def _queue(ctx: ServerContext) -> dict[str, Any]:
    """The queue as the Queue page and its live data read it: shared, as the cluster view is (`Caches.shared`)."""
    return ctx.caches.shared("queue", lambda: data.queue(ctx))


def queue_json(found: dict[str, Any], now: float) -> dict[str, Any]:
    pending = [
        {
            "position": j["position"],
            "id": j["id"],
            "ref": job_ref(j),
            "name": j["name"],
            "user": j["user"],
            "lab": j["lab"],
            "gpus": _gpus(j),
            "state": j["state"],
            "waiting": duration(now - j["submit_time"]),
            "estimate": _estimate(j["estimated_start"], now),
            "reason": j["reason"] or "",
        }
        for j in found["pending"]
    ]
    running = [
        {
            "id": j["id"],
            "ref": job_ref(j),
            "name": j["name"],
            "user": j["user"],
            "lab": j["lab"],
            "gpus": _gpus(j),
            "where": j["where"],
            "runtime": duration(now - (j["start_time"] or now)),
            "util": "–" if j["util_now"] is None else f"{j['util_now']:.0f}%",
            "util_avg": "–" if j["gpu_util_avg"] is None else f"{j['gpu_util_avg']:.0f}%",
            "idle": _idle_text(j, now),
            "borrowing": bool(j["borrowing"]),
        }
        for j in found["running"]
    ]
    return {"time": now, "pending": pending, "waiting": found["waiting"], "running": running}


def _gpus(job: dict[str, Any]) -> str:
    return f"{job['nodes']}×{job['gpus']}" if job["nodes"] > 1 else str(job["gpus"])


def _estimate(t: float | None, now: float) -> str:
    if t is None:
        return "unknown"
    return "now" if t <= now else f"in {duration(t - now)}"


def _idle_text(job: dict[str, Any], now: float) -> str:
    if job["idle_stage"] in ("flagged", "released") and job["idle_since"] is not None:
        return f"idle {duration(now - job['idle_since'])}"
    return ""


@router.get("/queue")
async def queue_page(request: Request, who: WebCaller) -> Response:
    found = await run_in_threadpool(_queue, request.app.state.ctx)
    return page(request, "queue.html", who, title="Queue", q=queue_json(found, time.time()))


@router.get("/ui/queue.json")
async def queue_live(request: Request, _: WebCaller) -> Response:
    found = await run_in_threadpool(_queue, request.app.state.ctx)
    return await _live(request, "queue", found, lambda: queue_json(found, time.time()))


@router.get("/nodes")
async def nodes_page(request: Request, who: WebCaller) -> Response:
    ctx = request.app.state.ctx
    view = await run_in_threadpool(shared, ctx)
    history = await run_in_threadpool(data.node_history, ctx)
    rows = [(n, [tile(n, g, view.time) for g in n.gpus]) for n in view.nodes]
    return page(request, "nodes.html", who, title="Nodes", view=view, rows=rows, ago=ago, history=history)


@router.get("/labs")
async def labs_page(request: Request, who: WebCaller) -> Response:
    found = await run_in_threadpool(data.labs_page, request.app.state.ctx)
    for lab in found:
        lab["day_chart"] = charts.columns(lab["by_day"], "GPU-h")
        lab["user_chart"] = charts.rows(lab["by_user"], "GPU-h")
    return page(request, "labs.html", who, title="Labs", labs=found)
