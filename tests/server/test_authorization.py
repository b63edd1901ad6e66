"""Who may call what: every operation of the published API against every kind of caller, with the exact status.

The table has one row per operation of `app.openapi()` (a new operation without a row fails the test) and one
column per caller:

- `anon`: no token; `bad`: a token nobody holds;
- `member`: dave, a member of lab `physics`, tied to nothing the request names;
- `other`: carol, a member of lab `nlp` only (the job's lab is `vision`);
- `mate`: bob, a member of `vision` like the job's owner, but not its owner;
- `owner`: alice, who owns the job and is the user the path names (`/users/alice/...`);
- `admin`; `node`: the node token of `gpu-01`;
- `mgr`: erin, a manager of lab `vision` (the job's lab), who owns nothing; `omgr`: frank, a manager of lab `nlp`.

`GET /auth`, `POST /login` and `POST /login/oidc` take no token (this server has no directory and no single
sign-on, so both logins are 400).
Users act on their own jobs only (cancel, checkpoint, logs), a lab's managers on that lab's jobs, members and
member limits and on no other lab's; admins on everything; everyone sees the queue, the
nodes, labs and usage; node tokens reach only the agent endpoint. Every cell runs against a fresh resource where
the call changes one, and a refused call must leave what it aimed at unchanged.

The matrix runs on SQLite: who may do what is decided before the database is asked, and the API suites run every
operation on PostgreSQL too.
"""

# ruff: noqa: E501  (the table's rows are one line each, a column per caller)

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from nanum.server.context import ServerContext
from nanum.server.schemas import UserIn
from nanum.server.services import accounts
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth, submit, tick
from tests.server.fakeagent import FakeAgent

CAROL, DAVE = "carol-token", "dave-token"
CALLERS = ("anon", "bad", "member", "other", "mate", "owner", "admin", "node", "mgr", "omgr")
ERIN, FRANK = "erin-token", "frank-token"
pytestmark = pytest.mark.parametrize("database", ["sqlite"], indirect=True)


@dataclass
class World:
    """The resources a cell acts on, and fresh ones on demand."""

    client: AsgiClient
    agent: FakeAgent
    job: int
    serial: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def fresh_name(self, prefix: str) -> str:
        return f"{prefix}{next(self.serial)}"

    def fresh_job(self, *, running: bool = False) -> int:
        j = int(submit(self.client, ALICE, gpus=0, name=self.fresh_name("j"))["id"])  # type: ignore[arg-type]
        if running:
            tick(self.client)
            self.agent.beat()
            got = self.read(f"/api/v1/jobs/{j}")
            assert got["state"] == "running", got
        return j

    def read(self, url: str) -> Any:
        r = self.client.get(url, headers=auth(ADMIN))
        assert r.status_code == 200, r.text
        return r.json()


@dataclass(frozen=True)
class Call:
    """One request, and what it aims at: `witness()` reads that; a refused call must leave it unchanged."""

    url: str
    body: Any = None
    raw: bytes | None = None
    witness: Callable[[], Any] | None = None


def job_state(w: World, j: int) -> Callable[[], Any]:
    return lambda: {k: w.read(f"/api/v1/jobs/{j}")[k] for k in ("state", "last_checkpoint", "reason")}


def names(w: World, url: str) -> Callable[[], Any]:
    return lambda: sorted(x["name"] for x in w.read(url))


def heartbeat(w: World) -> Call:
    return Call("/api/v1/agent/heartbeat", raw=w.agent.heartbeat().model_dump_json().encode())


def lab_quota(w: World) -> Callable[[], Any]:
    keys = ("guaranteed_gpus", "max_gpus", "max_running_jobs", "monthly_gpu_hours", "weight", "grace_s")
    return lambda: {k: w.read("/api/v1/labs/vision")[k] for k in keys}


def user_limits(w: World) -> Callable[[], Any]:
    return lambda: [u for u in w.read("/api/v1/users") if u["name"] == "alice"]


def cancel(w: World) -> Call:
    j = w.fresh_job()
    return Call(f"/api/v1/jobs/{j}/cancel", witness=job_state(w, j))


Make = Callable[[World], Call]


def pending_job(path: str, body: Any = None) -> Make:
    """A call on a fresh pending job (held first for a release)."""

    def make(w: World) -> Call:
        j = w.fresh_job()
        if path == "/release":
            assert send(w, "POST", Call(f"/api/v1/jobs/{j}/hold"), ADMIN) == 200
        return Call(f"/api/v1/jobs/{j}{path}", body, witness=lambda: {
            k: w.read(f"/api/v1/jobs/{j}")[k] for k in ("state", "reason", "name", "submit_time")})

    return make


def requeue(w: World) -> Call:
    j = w.fresh_job(running=True)
    return Call(f"/api/v1/jobs/{j}/requeue", witness=job_state(w, j))


def checkpoint(w: World) -> Call:
    j = w.fresh_job(running=True)
    return Call(f"/api/v1/jobs/{j}/checkpoint", witness=job_state(w, j))


def accept_gpus(w: World) -> Call:
    """gpu-01's agent reports one GPU more than it was accepted with; the call accepts it."""
    w.agent.gpus += 1
    w.agent.beat()

    def inventory() -> Any:
        node = next(n for n in w.read(V1 + "/nodes") if n["name"] == "gpu-01")
        return [[g["index"] for g in node[k]] for k in ("gpus", "unaccepted_gpus")]

    return Call(V1 + "/nodes/gpu-01/accept", witness=inventory)


def fresh_node(w: World, *, drained: bool = False) -> tuple[str, Callable[[], Any]]:
    """A node of its own for a cell that changes one (drained first, for resume), and how to read it back."""
    name = w.fresh_name("n")
    assert send(w, "POST", Call(V1 + "/nodes", {"name": name}), ADMIN) == 201
    if drained:
        assert send(w, "POST", Call(f"{V1}/nodes/{name}/drain", {"reason": "test"}), ADMIN) == 200
    return name, lambda: [n for n in w.read(V1 + "/nodes") if n["name"] == name]


def node_call(path: str, body: Any = None, *, drained: bool = False) -> Make:
    def make(w: World) -> Call:
        name, witness = fresh_node(w, drained=drained)
        return Call(f"{V1}/nodes/{name}{path}", body, witness=witness)

    return make


def fresh_user(w: World, *labs: str) -> str:
    name = w.fresh_name("u")
    r = w.client.post(V1 + "/users", json={"name": name, "labs": list(labs)}, headers=auth(ADMIN))
    assert r.status_code == 201, r.text
    return name


def vision_members(w: World) -> Callable[[], Any]:
    return lambda: [(m["user"], m["role"]) for m in w.read(V1 + "/labs/vision/members")]


def add_member(w: World) -> Call:
    """An existing user of another lab, added to `vision`."""
    return Call(f"{V1}/labs/vision/members/{fresh_user(w, 'physics')}", {"role": "member"}, witness=vision_members(w))


def remove_member(w: World) -> Call:
    return Call(f"{V1}/labs/vision/members/{fresh_user(w, 'vision')}", witness=vision_members(w))


def revoke_alices_token(w: World) -> Call:
    r = w.client.post(V1 + "/tokens", json={"name": w.fresh_name("t")}, headers=auth(ALICE))
    assert r.status_code == 201, r.text
    return Call(f"{V1}/tokens/{r.json()['id']}?user=alice", witness=names(w, V1 + "/tokens?user=alice"))


def vision_environment(w: World) -> str:
    """A fresh environment of alice's for lab vision."""
    name = w.fresh_name("env")
    r = w.client.post(V1 + "/environments", json={"name": name, "setup": "true"}, headers=auth(ALICE))
    assert r.status_code == 201, r.text
    return name


def vision_dataset(w: World) -> str:
    name = w.fresh_name("data")
    r = w.client.post(V1 + "/datasets", json={"name": name, "path": "/data/x", "lab": "vision"}, headers=auth(ADMIN))
    assert r.status_code == 201, r.text
    return name


def submit_job(w: World) -> Call:
    return Call("/api/v1/jobs", {"command": ["true"], "gpus": 0}, witness=lambda: len(w.read("/api/v1/jobs?all=1")))





def at(url: str, body: Any = None, witness: Callable[[World], Callable[[], Any]] | None = None) -> Make:
    return lambda w: Call(url.format(job=w.job), body, witness=witness(w) if witness else None)


@dataclass(frozen=True)
class Row:
    method: str
    path: str
    make: Make
    expect: tuple[int, ...]

    @property
    def id(self) -> str:
        return f"{self.method} {self.path}"


def row(method: str, path: str, make: Make, *expect: int) -> Row:
    assert len(expect) == len(CALLERS), path
    return Row(method, path, make, expect)


V1 = "/api/v1"
JOB = V1 + "/jobs/{job}"
TABLE = [
    #                                                                         anon bad memb othr mate ownr admn node mgr omgr
    row("GET", "/api/v1/health", at(V1 + "/health"),                           200, 200, 200, 200, 200, 200, 200, 200, 200, 200),
    row("POST", "/api/v1/jobs", submit_job,                                    401, 401, 201, 201, 201, 201, 201, 401, 201, 201),
    row("GET", "/api/v1/jobs", at(V1 + "/jobs"),                               401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("GET", "/api/v1/jobs/{job_id}", at(JOB),                               401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("POST", "/api/v1/jobs/{job_id}/cancel", cancel,                        401, 401, 403, 403, 403, 200, 200, 401, 200, 403),
    row("POST", "/api/v1/jobs/{job_id}/checkpoint", checkpoint,                401, 401, 403, 403, 403, 200, 200, 401, 200, 403),
    row("PATCH", "/api/v1/jobs/{job_id}", pending_job("", {"name": "renamed"}),
                                                                               401, 401, 403, 403, 403, 200, 200, 401, 200, 403),
    row("POST", "/api/v1/jobs/{job_id}/hold", pending_job("/hold"),            401, 401, 403, 403, 403, 200, 200, 401, 200, 403),
    row("POST", "/api/v1/jobs/{job_id}/release", pending_job("/release"),      401, 401, 403, 403, 403, 200, 200, 401, 200, 403),
    row("POST", "/api/v1/jobs/{job_id}/top", pending_job("/top"),              401, 401, 403, 403, 403, 200, 200, 401, 200, 403),
    row("POST", "/api/v1/jobs/{job_id}/requeue", requeue,                      401, 401, 403, 403, 403, 200, 200, 401, 200, 403),
    row("GET", "/api/v1/jobs/{job_id}/logs", at(JOB + "/logs"),                401, 401, 403, 403, 403, 200, 200, 401, 200, 403),
    row("GET", "/api/v1/jobs/{job_id}/usage", at(JOB + "/usage"),              401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("GET", "/api/v1/nodes", at(V1 + "/nodes"),                             401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("GET", "/api/v1/nodes/{name}", at(V1 + "/nodes/gpu-01"),               401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("POST", "/api/v1/nodes",
        lambda w: Call(V1 + "/nodes", {"name": w.fresh_name("n")}, witness=names(w, V1 + "/nodes")),
                                                                               401, 401, 403, 403, 403, 403, 201, 401, 403, 403),
    row("POST", "/api/v1/nodes/{name}/accept", accept_gpus,                   401, 401, 403, 403, 403, 403, 200, 401, 403, 403),
    row("PATCH", "/api/v1/nodes/{name}", node_call("", {"labels": ["rack=r9"]}),
                                                                               401, 401, 403, 403, 403, 403, 200, 401, 403, 403),
    row("POST", "/api/v1/nodes/{name}/drain", node_call("/drain", {"reason": "maintenance"}),
                                                                               401, 401, 403, 403, 403, 403, 200, 401, 403, 403),
    row("POST", "/api/v1/nodes/{name}/resume", node_call("/resume", drained=True),
                                                                               401, 401, 403, 403, 403, 403, 200, 401, 403, 403),
    row("DELETE", "/api/v1/nodes/{name}", node_call(""),                       401, 401, 403, 403, 403, 403, 204, 401, 403, 403),
    row("GET", "/api/v1/nodes/{name}/gpus/{index}/history", at(V1 + "/nodes/gpu-01/gpus/0/history"),
                                                                               401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("GET", "/api/v1/me", at(V1 + "/me"),                                   401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("GET", "/api/v1/users", at(V1 + "/users"),                             401, 401, 403, 403, 403, 403, 200, 401, 403, 403),
    row("POST", "/api/v1/users",
        lambda w: Call(V1 + "/users", {"name": w.fresh_name("u"), "labs": ["vision"], "admin": True},
                       witness=names(w, V1 + "/users")),
                                                                               401, 401, 403, 403, 403, 403, 201, 401, 403, 403),
    row("POST", "/api/v1/users/import",
        lambda w: Call(V1 + "/users/import", {"users": [{"name": w.fresh_name("i"), "labs": ["vision"]}]},
                       witness=names(w, V1 + "/users")),
                                                                               401, 401, 403, 403, 403, 403, 200, 401, 403, 403),
    row("PATCH", "/api/v1/users/{name}", at(V1 + "/users/alice", {"max_gpus": 64}, user_limits),
                                                                               401, 401, 403, 403, 403, 403, 200, 401, 403, 403),
    row("POST", "/api/v1/users/{name}/disable", at(V1 + "/users/dave/disable"),
                                                                               401, 401, 403, 403, 403, 403, 200, 401, 403, 403),
    row("POST", "/api/v1/users/{name}/enable", at(V1 + "/users/dave/enable"),  401, 401, 403, 403, 403, 403, 200, 401, 403, 403),
    row("PUT", "/api/v1/users/{name}/contact",
        at(V1 + "/users/alice/contact", {"email": "x@example.org"}),           401, 401, 403, 403, 403, 200, 200, 401, 403, 403),
    row("GET", "/api/v1/labs", at(V1 + "/labs"),                               401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("POST", "/api/v1/labs",
        lambda w: Call(V1 + "/labs", {"name": w.fresh_name("lab")}, witness=names(w, V1 + "/labs")),
                                                                               401, 401, 403, 403, 403, 403, 201, 401, 403, 403),
    row("GET", "/api/v1/labs/{name}", at(V1 + "/labs/vision"),                 401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("PATCH", "/api/v1/labs/{name}", at(V1 + "/labs/vision", {"max_gpus": 64}, lab_quota),
                                                                               401, 401, 403, 403, 403, 403, 200, 401, 403, 403),
    row("GET", "/api/v1/labs/{name}/idle", at(V1 + "/labs/vision/idle"),       401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("PATCH", "/api/v1/labs/{name}/idle",
        at(V1 + "/labs/vision/idle", {"util_percent": 1.0}, lambda w: lambda: w.read(V1 + "/labs/vision/idle")),
                                                                               401, 401, 403, 403, 403, 403, 200, 401, 403, 403),
    row("GET", "/api/v1/monitoring/idle", at(V1 + "/monitoring/idle"),         401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("PATCH", "/api/v1/monitoring/idle",
        at(V1 + "/monitoring/idle", {"util_percent": 1.0}, lambda w: lambda: w.read(V1 + "/monitoring/idle")),
                                                                               401, 401, 403, 403, 403, 403, 200, 401, 403, 403),
    row("GET", "/api/v1/monitoring/notify", at(V1 + "/monitoring/notify"),     401, 401, 403, 403, 403, 403, 200, 401, 403, 403),
    row("PATCH", "/api/v1/monitoring/notify",
        at(V1 + "/monitoring/notify", {"public_url": "https://gpu.example.org"},
           lambda w: lambda: w.read(V1 + "/monitoring/notify")),               401, 401, 403, 403, 403, 403, 200, 401, 403, 403),
    row("GET", "/api/v1/usage", at(V1 + "/usage"),                             401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("GET", "/api/v1/priority", at(V1 + "/priority"),                       401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("GET", "/api/v1/trace", at(V1 + "/trace"),                             401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("GET", "/api/v1/reports/usage", at(V1 + "/reports/usage"),             401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("GET", "/api/v1/labs/{lab}/members", at(V1 + "/labs/vision/members"), 401, 401, 403, 403, 403, 403, 200, 401, 200, 403),
    row("PUT", "/api/v1/labs/{lab}/members/{user}", add_member,                401, 401, 403, 403, 403, 403, 200, 401, 200, 403),
    row("DELETE", "/api/v1/labs/{lab}/members/{user}", remove_member,          401, 401, 403, 403, 403, 403, 204, 401, 204, 403),
    row("PATCH", "/api/v1/labs/{lab}/members/{user}",
        at(V1 + "/labs/vision/members/alice", {"max_gpus": 2}, user_limits),   401, 401, 403, 403, 403, 403, 200, 401, 200, 403),
    row("POST", "/api/v1/tokens", at(V1 + "/tokens", {"name": "laptop"}),     401, 401, 201, 201, 201, 201, 201, 401, 201, 201),
    row("GET", "/api/v1/tokens", at(V1 + "/tokens"),                           401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("DELETE", "/api/v1/tokens/{token_id}", revoke_alices_token,             401, 401, 403, 403, 403, 204, 204, 401, 403, 403),
    row("GET", "/api/v1/auth", at(V1 + "/auth"),                               200, 200, 200, 200, 200, 200, 200, 200, 200, 200),
    row("POST", "/api/v1/login", at(V1 + "/login", {"username": "alice", "password": "pw"}),
                                                                               400, 400, 400, 400, 400, 400, 400, 400, 400, 400),
    row("POST", "/api/v1/login/oidc", at(V1 + "/login/oidc", {"id_token": "a.b.c"}),
                                                                               400, 400, 400, 400, 400, 400, 400, 400, 400, 400),
    row("POST", "/api/v1/environments",
        lambda w: Call(V1 + "/environments", {"name": w.fresh_name("env"), "setup": "true"},
                       witness=names(w, V1 + "/environments")),
                                                                               401, 401, 201, 201, 201, 201, 201, 401, 201, 201),
    row("GET", "/api/v1/environments", at(V1 + "/environments"),               401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("GET", "/api/v1/environments/{name}", lambda w: Call(f"{V1}/environments/{vision_environment(w)}"),
                                                                               401, 401, 404, 404, 200, 200, 200, 401, 200, 404),
    row("DELETE", "/api/v1/environments/{name}",
        lambda w: Call(f"{V1}/environments/{vision_environment(w)}", witness=names(w, V1 + "/environments")),
                                                                               401, 401, 403, 403, 403, 204, 204, 401, 204, 403),
    row("POST", "/api/v1/datasets",
        lambda w: Call(V1 + "/datasets", {"name": w.fresh_name("data"), "path": "/data/x", "lab": "vision"},
                       witness=names(w, V1 + "/datasets")),
                                                                               401, 401, 403, 403, 403, 403, 201, 401, 201, 403),
    row("GET", "/api/v1/datasets", at(V1 + "/datasets"),                       401, 401, 200, 200, 200, 200, 200, 401, 200, 200),
    row("DELETE", "/api/v1/datasets/{name}",
        lambda w: Call(f"{V1}/datasets/{vision_dataset(w)}", witness=names(w, V1 + "/datasets")),
                                                                               401, 401, 403, 403, 403, 403, 204, 401, 204, 403),
    row("GET", "/api/v1/jobs/{job_id}/checkpoints", at(JOB + "/checkpoints"),  401, 401, 403, 403, 403, 200, 200, 401, 200, 403),
    row("POST", "/api/v1/agent/heartbeat", heartbeat,                          401, 401, 401, 401, 401, 401, 401, 200, 401, 401),
]


@pytest.fixture
def world(client: AsgiClient, ctx: ServerContext, agent: FakeAgent) -> World:
    accounts.create_user(ctx, UserIn(name="carol", labs=["nlp"]), CAROL)
    accounts.create_user(ctx, UserIn(name="dave", labs=["physics"]), DAVE)
    accounts.create_user(ctx, UserIn(name="erin", labs=["vision"]), ERIN)
    accounts.create_user(ctx, UserIn(name="frank", labs=["nlp"]), FRANK)
    for lab, user in (("vision", "erin"), ("nlp", "frank")):
        r = client.request("PUT", f"{V1}/labs/{lab}/members/{user}", json={"role": "manager"}, headers=auth(ADMIN))
        assert r.status_code == 200, r.text
    w = World(client, agent, job=0)
    w.job = w.fresh_job(running=True)
    return w


def token_of(caller: str, w: World) -> str | None:
    tokens = {"bad": "no-such-token", "member": DAVE, "other": CAROL, "mate": BOB, "owner": ALICE, "admin": ADMIN,
              "mgr": ERIN, "omgr": FRANK}
    return w.agent.token if caller == "node" else tokens.get(caller)


def send(w: World, method: str, call: Call, token: str | None) -> int:
    headers = auth(token) if token else {}
    if call.raw is not None:
        json_headers = {**headers, "Content-Type": "application/json"}
        r = w.client.request(method, call.url, content=call.raw, headers=json_headers)
    elif call.body is not None:
        r = w.client.request(method, call.url, json=call.body, headers=headers)
    else:
        r = w.client.request(method, call.url, headers=headers)
    if r.status_code >= 400:
        assert r.headers["content-type"] == "application/json" and r.json()["detail"], r.text
    return r.status_code


def test_the_table_covers_every_operation_of_the_api(client: AsgiClient) -> None:
    published = {f"{m.upper()} {p}" for p, ops in client.app.openapi()["paths"].items() for m in ops}
    tabled = [r.id for r in TABLE]
    assert len(tabled) == len(set(tabled)), "a row appears twice"
    assert published - set(tabled) == set(), "add these operations to TABLE"
    assert set(tabled) - published == set(), "these rows name operations the API no longer has"


@pytest.mark.parametrize("entry", TABLE, ids=lambda r: r.id)
def test_who_may_call_what(world: World, entry: Row) -> None:
    got: dict[str, int] = {}
    for caller in CALLERS:
        call = entry.make(world)
        before = call.witness() if call.witness else None
        got[caller] = send(world, entry.method, call, token_of(caller, world))
        if call.witness and got[caller] >= 400:
            assert call.witness() == before, f"{caller}'s refused {entry.id} changed what it aimed at"
    assert got == dict(zip(CALLERS, entry.expect, strict=True))
