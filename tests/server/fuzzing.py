"""Fuzzing the published API with schemathesis: every operation of `app.openapi()`, then linked sequences.

Both phases call the real app (its lifespan and scheduler loop running) over a real database, as an admin, a
member or a node. A `Tally` counts each response by status and keeps a `Finding` for every server error (a 5xx,
or an exception the app let escape, which a real server answers with 500) and for every response that does not
match the schema the API publishes. Used by `tests/server/test_fuzz.py` (a few thousand cases) and
`benchmarks/fuzz.py` (tens of thousands).

- **operations**: for each operation, `examples` requests built from its schema, half of them valid
  (`positive`) and half not (`negative`: wrong types, out-of-range numbers, missing fields), each sent with a
  token drawn from the three;
- **stateful**: schemathesis' state machine follows the links it infers between operations (a submitted job's
  id into show, cancel, checkpoint, logs, ...); each scenario acts as the admin or as the member, and
  heartbeats always carry the node's token.

Heartbeats are sent with `wait_s` 0: a held heartbeat would only make the run slower.
"""

from __future__ import annotations

import itertools
import logging
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, given
from hypothesis import strategies as st
from hypothesis.errors import FlakyStrategyDefinition
from schemathesis import GenerationMode
from schemathesis.checks import content_type_conformance, response_schema_conformance
from schemathesis.core.failures import FailureGroup
from schemathesis.python import asgi

from nanum.server.app import create_app
from nanum.server.callers import hash_token
from nanum.server.context import ServerContext
from nanum.server.job_schemas import JobSubmit
from nanum.server.schemas import UserIn
from nanum.server.services import accounts, jobs, logins

ADMIN, MEMBER = "fuzz-admin-token", "fuzz-member-token"
HEARTBEAT = "/api/v1/agent/heartbeat"
CONFORMANCE = [response_schema_conformance, content_type_conformance]


@dataclass(frozen=True)
class Identities:
    admin: str
    member: str
    node: str

    def all(self) -> tuple[str, str, str]:
        return (self.admin, self.member, self.node)


@dataclass(frozen=True)
class Finding:
    kind: str  # "5xx" or "schema"
    request: str  # method, path, query and body as sent
    detail: str  # the status and body, or the exception and where it was raised


@dataclass
class Tally:
    statuses: Counter[int] = field(default_factory=Counter)
    findings: dict[tuple[str, str, str], tuple[Finding, int]] = field(default_factory=dict)
    background: list[str] = field(default_factory=list)
    cut_short: int = 0  # stateful chunks Hypothesis ended early (see `Fuzzer.run_stateful`)

    @property
    def cases(self) -> int:
        return sum(self.statuses.values())

    def by_class(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for status, n in self.statuses.items():
            out[f"{status // 100}xx" if status else "exception"] += n
        return dict(sorted(out.items()))

    def server_errors(self) -> list[tuple[Finding, int]]:
        return [f for f in self.findings.values() if f[0].kind == "5xx"]

    def nonconforming(self) -> list[tuple[Finding, int]]:
        return [f for f in self.findings.values() if f[0].kind == "schema"]

    def add(self, finding: Finding, where: str) -> None:
        """Keep the first request of each kind of finding (by operation and place), counting repeats."""
        key = (finding.kind, finding.request.split(" ", 2)[1], where)
        first, n = self.findings.get(key, (finding, 0))
        self.findings[key] = (first, n + 1)

    def report(self) -> str:
        lines = [f"cases: {self.cases}", f"statuses by class: {self.by_class()}",
                 f"statuses: {dict(sorted(self.statuses.items()))}", f"stateful chunks cut short: {self.cut_short}"]
        for finding, n in self.findings.values():
            lines.append(f"{finding.kind} x{n}: {finding.request}\n    {finding.detail}")
        lines += [f"background error: {b}" for b in self.background]
        return "\n".join(lines)


def prepare(ctx: ServerContext) -> Identities:
    """An admin, a member of lab `vision` with a few jobs, and node `gpu-01`."""
    accounts.create_user(ctx, UserIn(name="fuzz-admin", labs=["default"], admin=True), ADMIN)
    accounts.create_user(ctx, UserIn(name="fuzz-member", labs=["vision"]), MEMBER)
    member = logins.caller_by_token_hash(ctx, hash_token(MEMBER))
    assert member is not None
    for gpus in (0, 1, 2):
        jobs.submit(ctx, member, JobSubmit(command=["python", "train.py"], gpus=gpus))
    return Identities(ADMIN, MEMBER, accounts.add_node(ctx, "gpu-01"))


#: The fuzzing identities' names: calls that would take away their tokens, admin right or lab aim elsewhere.
FUZZERS = ("fuzz-admin", "fuzz-member")


def _spare_the_fuzzers(case: Any) -> None:
    """Keep the run's own identities able to act: revoking one's first token (id 0), importing them with other
    roles or labs, or taking the member out of its lab would leave the rest of the run refused at the door (401,
    403), however correct that is. Such a call is sent about someone else instead."""
    params = case.path_parameters or {}
    if case.path == "/api/v1/tokens/{token_id}" and params.get("token_id") == 0:
        params["token_id"] = 1_000_000
    if case.path.startswith("/api/v1/labs/{lab}/members/{user}") and params.get("user") in FUZZERS:
        params["user"] = "someone-else"
    if case.path == "/api/v1/users/import" and isinstance(case.body, dict) and isinstance(case.body.get("users"), list):
        for entry in case.body["users"]:
            if isinstance(entry, dict) and entry.get("name") in FUZZERS:
                entry["name"] = f"x{entry['name']}"


#: How long one request may take before it counts as a failure (seconds).
REQUEST_TIMEOUT_S = 60


class Fuzzer:
    """An app over `ctx` with its scheduler running, its schema, and the tally of what it answered. Errors its
    background loops log are tallied too. `close()` stops the app."""

    def __init__(self, ctx: ServerContext, ids: Identities, tally: Tally) -> None:
        self.ids, self.tally = ids, tally
        self.app: FastAPI = create_app(ctx, run_scheduler=True)
        self.catcher = _Catcher(self.app)
        self.schema = schemathesis.openapi.from_asgi("/openapi.json", self.catcher)
        self._log = _ErrorLog(tally)
        logging.getLogger("nanum").addHandler(self._log)

    def close(self) -> None:
        asgi.shutdown_lifespans()
        logging.getLogger("nanum").removeHandler(self._log)
        self.app.state.scheduler.leadership.release()

    def send(self, case: Any, token: str) -> None:
        """Send `case` with `token`; tally its status, a server error, or a response the schema does not allow."""
        headers = {"Authorization": f"Bearer {token}"}
        self.check(case, case.call(**self.prepare(case, headers)), headers)

    @staticmethod
    def prepare(case: Any, headers: dict[str, str]) -> dict[str, Any]:
        if case.path == HEARTBEAT and isinstance(case.body, dict) and "wait_s" in case.body:
            case.body["wait_s"] = 0
        _spare_the_fuzzers(case)
        # What is checked is each answer, not its speed: on a loaded machine (the suite beside CPU hogs) one request
        # took longer than schemathesis's 10 s, and Hypothesis called the test flaky.
        return {"headers": headers, "timeout": REQUEST_TIMEOUT_S}

    def check(self, case: Any, response: Any, headers: dict[str, str]) -> None:
        tally = self.tally
        tally.statuses[response.status_code] += 1
        if response.status_code >= 500:
            exc, self.catcher.raised = self.catcher.raised, None
            where = _raised_at(exc) if exc else str(response.status_code)
            detail = f"{type(exc).__name__}: {exc} (at {where})" if exc else response.text[:300]
            tally.add(Finding("5xx", _request(case), f"{response.status_code} {detail}"), where)
            return
        try:
            case.validate_response(response, checks=CONFORMANCE, headers=headers)
        except FailureGroup as group:
            for failure in group.exceptions:
                detail = f"{response.status_code} {failure.title}: {str(failure.message)[:300]}"
                tally.add(Finding("schema", _request(case), detail), f"{response.status_code} {failure.title}")

    def run_operations(self, examples: int, derandomize: bool = True) -> None:
        """`examples` requests for each operation, valid and invalid alike, each with one of the three tokens."""
        for result in self.schema.get_all_operations():
            operation = result.ok()
            cases = st.one_of(
                operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
                operation.as_strategy(generation_mode=GenerationMode.NEGATIVE),
            )

            @_settings(examples, derandomize)
            @given(case=cases, token=st.sampled_from(self.ids.all()))
            def one(case: Any, token: str) -> None:
                self.send(case, token)

            one()

    def run_stateful(self, scenarios: int, steps: int, chunk: int = 10) -> None:
        """`scenarios` sequences of up to `steps` linked calls, alternately as the admin and as the member.

        The server's state carries over between scenarios, so Hypothesis may find that replaying the start of a
        scenario led elsewhere the second time (`FlakyStrategyDefinition`); scenarios are therefore run in
        chunks of `chunk`, and a chunk cut short that way is counted in `Tally.cut_short`, not retried."""
        people = itertools.cycle((self.ids.admin, self.ids.member))
        fuzzer, node = self, self.ids.node

        class Machine(self.schema.as_state_machine()):  # type: ignore[misc]
            def setup(self) -> None:
                self.token = next(people)

            def get_call_kwargs(self, case: Any) -> dict[str, Any]:
                token = node if case.path == HEARTBEAT else self.token
                return fuzzer.prepare(case, {"Authorization": f"Bearer {token}"})

            def validate_response(self, response: Any, case: Any, additional_checks: Any = None, **kw: Any) -> None:
                fuzzer.check(case, response, kw.get("headers", {}))

        for done in range(0, scenarios, chunk):
            settings = hypothesis.settings(_settings(min(chunk, scenarios - done), False), stateful_step_count=steps)
            try:
                Machine.run(settings=settings)
            except FlakyStrategyDefinition:
                self.tally.cut_short += 1


class _Catcher:
    """The app, keeping the exception a request raised (the client has its 500 by then) instead of raising it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.raised: BaseException | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        except Exception as exc:
            if scope["type"] != "http":
                raise
            self.raised = exc


class _ErrorLog(logging.Handler):
    def __init__(self, tally: Tally) -> None:
        super().__init__(logging.ERROR)
        self.tally = tally

    def emit(self, record: logging.LogRecord) -> None:
        self.tally.background.append(f"{record.name}: {record.getMessage()} {record.exc_text or ''}".strip())


def _request(case: Any) -> str:
    query = f"?{case.query}" if case.query else ""
    body = "" if type(case.body).__name__ == "NotSet" else f" body={case.body!r:.400}"
    return f"{case.method} {case.formatted_path}{query}{body}"


def _raised_at(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/nanum/" in f.filename] or frames
    return f"{ours[-1].filename.rsplit('/src/', 1)[-1]}:{ours[-1].lineno}"


def _settings(examples: int, derandomize: bool) -> hypothesis.settings:
    return hypothesis.settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=derandomize,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
