"""The Submit page: a form for a batch job, a notebook or a shell that builds the same `JobSubmit` as
`POST /api/v1/jobs` and goes through the same service, so it is checked the same way and refused with the same
sentence. A value the
form reads itself (memory `32G`, time `4h`, `KEY=VALUE` lines, the command line) is refused with one sentence
naming the field. The page comes back with what was typed and the sentence (422, or the API's status for a
refusal); a job made sends the browser to its page (303).

The command is split into words as a shell would (quotes and backslashes work) and run as those words, as
`nanum submit -- WORDS` runs them; no shell runs it, so a line that needs one (`|`, `>`, `&&`, `$VAR`, a glob) is
refused with a pointer to `sh -c '...'` rather than passed on as literal words. A shell is submitted as
`nanum shell` submits one, and the browser goes to its terminal page (`nanum.server.web.terminal`).
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from nanum import units
from nanum.server.callers import Caller
from nanum.server.context import ServerContext
from nanum.server.errors import ApiError, validation_message
from nanum.server.job_schemas import JobSubmit
from nanum.server.services import accounts, catalog, environments, jobs
from nanum.server.web import session
from nanum.server.web.render import page

router = APIRouter(include_in_schema=False)
WebCaller = Annotated[Caller, Depends(session.caller)]

#: The form's text fields (datasets, a multi-select, and the checkboxes aside).
FIELDS = ("kind", "command", "name", "gpus", "nodes", "gpu_model", "gpu_memory", "constraints", "cpus", "memory",
          "time", "array", "lab", "priority", "environment", "workdir", "env", "request")
#: The form's checkboxes ("on" when ticked).
CHECKBOXES = ("no_preempt", "hold")
#: Passed to `JobSubmit` as typed, so a bad one gets the API's own sentence (`invalid gpus: ...`).
AS_TYPED = ("gpus", "nodes", "cpus", "priority", "name", "gpu_model", "lab", "environment", "workdir", "array")
#: What a shell would do with these, unquoted: the form runs no shell, so it refuses them rather than pass them on.
SHELL_ONLY = frozenset("|&;<>()$`*?\n")
#: What the job of a kind the agent runs itself is submitted with (as `nanum notebook` and `nanum shell` do).
SESSION_COMMANDS = {"notebook": ["jupyter", "lab"], "shell": ["shell"]}


# -- the form as a JobSubmit -----------------------------------------------------------------------------------


def request_body(form: Mapping[str, str], datasets: list[str]) -> dict[str, Any]:
    """The `POST /jobs` body the form describes; ValueError naming the field it cannot read."""
    kind = form.get("kind") or "batch"
    body: dict[str, Any] = {key: form[key] for key in AS_TYPED if form.get(key)}
    body.update(kind=kind, datasets=datasets, preemptible=form.get("no_preempt") != "on", hold=form.get("hold") == "on",
                command=SESSION_COMMANDS[kind] if kind in SESSION_COMMANDS else command_words(form.get("command", "")))
    if kind in SESSION_COMMANDS:
        body.setdefault("name", kind)
        if body.pop("array", None):
            raise ValueError(f"array: a {kind} is one job; give an array for a batch job")
    if kind == "shell":  # the browser's terminal is an xterm
        body["env"] = {"TERM": "xterm-256color"}
    if form.get("gpu_memory"):
        body["gpu_memory_mb"] = units.parse_mem(form["gpu_memory"], "GPU memory")
    if form.get("constraints"):  # a label holds neither a comma nor a space (`nanum node set --label`)
        body["constraints"] = [units.parse_label(label, "node labels")
                               for label in form["constraints"].replace(",", " ").split()]
    if form.get("memory"):
        body["memory_mb"] = units.parse_mem(form["memory"], "memory")
    if form.get("time"):
        body["time_limit_s"] = units.parse_time(form["time"], "time limit")
    if form.get("env"):
        body["env"] = {**body.get("env", {}), **env_lines(form["env"])}
    if form.get("request"):
        body["client_request_id"] = form["request"]
    return body


def command_words(line: str) -> list[str]:
    """`python train.py --lr '1e-3'` -> its words, as a shell would split them; ValueError for what needs a shell."""
    if not line.strip():
        raise ValueError("command: nothing to run; give a command line such as python train.py --epochs 10")
    if (char := _needs_shell(line)) is not None:
        shown = "a line break" if char == "\n" else repr(char)
        raise ValueError(f"command: {shown} needs a shell, and the command runs without one; write it as "
                         "sh -c '...' (e.g. sh -c 'python train.py > train.log'), or quote it")
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise ValueError(f"command: {str(exc).lower()}; close the quote") from None


def _needs_shell(line: str) -> str | None:
    """The first character a shell would act on (outside quotes), or None: the line is words and nothing else."""
    quote, escaped = "", False
    for i, c in enumerate(line):
        word_start = i == 0 or line[i - 1] in " \t"
        if escaped:
            escaped = False
        elif quote == "'":
            quote = "" if c == "'" else quote
        elif c == "\\":
            escaped = True
        elif quote == '"':
            if c in "$`":
                return c
            quote = "" if c == '"' else quote
        elif c in "'\"":
            quote = c
        elif c in SHELL_ONLY or (c in "~#" and word_start):
            return c
    return None


def env_lines(text: str) -> dict[str, str]:
    """`KEY=VALUE` lines (blank ones skipped) -> a dict; ValueError naming the first line that is not one."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, value = line.strip().partition("=")
        if not sep or not name.isidentifier() or not name.isascii():
            raise ValueError(f"environment variables: {line.strip()!r} is not NAME=VALUE with a valid name, "
                             "e.g. SEED=1")
        found[name] = value
    return found


# -- the page --------------------------------------------------------------------------------------------------


def choices(ctx: ServerContext, caller: Caller) -> dict[str, Any]:
    """What the selects offer: the caller's labs (an admin: every lab), and the environments and datasets the
    caller may use, each with the lab it belongs to (None: everyone's)."""
    labs = sorted(catalog.labs(ctx)) if caller.admin else sorted(caller.labs)
    return {
        "labs": labs,
        "environments": [(e.name, e.lab) for e in environments.list_environments(ctx, caller)],
        "datasets": [(d.name, d.lab) for d in environments.list_datasets(ctx, caller)],
    }


async def _page(request: Request, who: Caller, form: Mapping[str, str], chosen: list[str],
                error: str | None = None, status: int = 200) -> Response:  # fmt: skip
    found = await run_in_threadpool(choices, request.app.state.ctx, who)
    values = {key: form.get(key, "") for key in (*FIELDS, *CHECKBOXES)}
    values["request"] = values["request"] or secrets.token_hex(12)
    values["kind"] = values["kind"] or "batch"
    values["lab"] = values["lab"] or who.default_lab or ""
    return page(request, "submit.html", who, status_code=status, title="Submit", f=values, chosen=chosen,
                error=error, **found)  # fmt: skip


@router.get("/submit")
async def submit_page(request: Request, who: WebCaller) -> Response:
    return await _page(request, who, {"gpus": "1"}, [])


def _submit(ctx: ServerContext, caller: Caller, spec: JobSubmit) -> int:
    accounts.refuse_root_jobs(ctx, caller)
    job, _ = jobs.submit(ctx, caller, spec)
    return int(job["id"])


def _landing(kind: str, job_id: int) -> str:
    """Where the browser goes once the job is queued: a shell's terminal, else the job's page."""
    return f"/jobs/{job_id}/terminal" if kind == "shell" else f"/jobs/{job_id}"


@router.post("/submit")
async def submit(request: Request, who: WebCaller) -> Response:
    """Queue the job the form describes and show its page; or the form again, as typed, with why not."""
    posted = await request.form()
    session.check_csrf(request, str(posted.get("csrf", "")))
    form = {k: str(v).strip() for k, v in posted.items() if k not in ("csrf", "datasets")}
    chosen = [str(v) for v in posted.getlist("datasets") if str(v)]
    try:
        spec = JobSubmit.model_validate(request_body(form, chosen))
        job_id = await run_in_threadpool(_submit, request.app.state.ctx, who, spec)
    except ValidationError as exc:  # before ValueError, which it is
        return await _page(request, who, form, chosen, validation_message(exc.errors()), 422)
    except ValueError as exc:
        return await _page(request, who, form, chosen, str(exc), 422)
    except ApiError as exc:
        return await _page(request, who, form, chosen, exc.detail, exc.status)
    return RedirectResponse(_landing(spec.request["kind"], job_id), status_code=303)
