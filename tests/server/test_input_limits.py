"""What the API refuses at the edge, in one sentence each: NUL bytes, numbers and sizes beyond the limits in
docs/api.md, NaN and Infinity, out-of-range dates and oversized bodies; and that what it returns stays valid JSON
even for rows stored before the limits existed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import update

from nanum.server.context import ServerContext
from nanum.server.limits import MAX_BODY, MAX_ID
from nanum.store import JobRow
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, auth, submit


def post_job(client: AsgiClient, **body: Any) -> Any:
    body.setdefault("command", ["python", "train.py"])
    return client.post("/api/v1/jobs", json=body, headers=auth(ALICE))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param({"command": ["echo", "a\0b"]}, "command[1] contains a NUL byte; remove it", id="argument"),
        pytest.param({"env": {"K": "v\0"}}, "env['K'] contains a NUL byte; remove it", id="env-value"),
        pytest.param({"env": {"K\0": "v"}}, "a key of env contains a NUL byte; remove it", id="env-name"),
        pytest.param({"name": "x\0"}, "name contains a NUL byte; remove it", id="name"),
        pytest.param({"workdir": "/tmp/\0"}, "workdir contains a NUL byte; remove it", id="workdir"),
        pytest.param({"lab": "vision\0"}, "lab contains a NUL byte; remove it", id="lab"),
    ],
)
def test_a_nul_byte_in_a_job_is_refused_naming_where(client: AsgiClient, body: dict[str, Any], message: str) -> None:
    r = post_job(client, **body)
    assert r.status_code == 422 and r.json() == {"detail": message}
    assert client.get("/api/v1/jobs", headers=auth(ALICE)).json() == []


def test_a_nul_byte_is_refused_in_every_input(client: AsgiClient) -> None:
    bodies = [
        ("POST", "/api/v1/users", {"name": "carol", "unix_user": "ca\0rol"}, "unix_user"),
        ("POST", "/api/v1/labs", {"name": "a\0b"}, "name"),
        ("PATCH", "/api/v1/monitoring/notify", {"smtp_host": "mail\0"}, "smtp_host"),
        ("PATCH", "/api/v1/monitoring/idle", {"batch_flag_s": "inherit\0"}, "batch_flag_s"),
        ("PUT", "/api/v1/users/alice/contact", {"email": "a\0@b.c"}, "email"),
    ]
    for method, path, body, where in bodies:
        r = client.request(method, path, json=body, headers=auth(ADMIN))
        assert r.status_code == 422 and r.json()["detail"] == f"{where} contains a NUL byte; remove it", r.text
    for path in ("/api/v1/labs/vi%00sion", "/api/v1/jobs?user=al%00ice"):
        r = client.get(path, headers=auth(ALICE))
        assert r.status_code == 422 and r.json() == {"detail": "the URL contains a NUL byte; remove it"}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        pytest.param("gpus", "1_6", "invalid gpus: '1_6' is not a whole number; give digits only, such as 3",
                     id="underscore"),
        pytest.param("gpus", " +2", "invalid gpus: ' +2' is not a whole number; give digits only, such as 3",
                     id="sign-and-space"),
        pytest.param("gpus", True, "invalid gpus: true is not a whole number; give digits only, such as 3", id="bool"),
        pytest.param("time_limit_s", "3_600", "invalid time_limit_s: '3_600' is not a number; give digits and a "
                     "decimal point, such as 1.5", id="float"),
    ],
)
def test_a_number_is_read_only_as_written(client: AsgiClient, field: str, value: Any, message: str) -> None:
    """pydantic alone reads "1_6" as 16 and true as 1: a job asking for GPUs it was never meant to have."""
    r = post_job(client, **{field: value})
    assert r.status_code == 422 and r.json() == {"detail": message}, r.text
    assert client.get("/api/v1/jobs", headers=auth(ALICE)).json() == []
    job = post_job(client, gpus="2", time_limit_s="90.5").json()  # text with a number as written is the number
    assert (job["gpus"], job["time_limit_s"]) == (2, 90.5)
    r = client.patch(f"/api/v1/jobs/{job['id']}", json={"gpus": "1_6"}, headers=auth(ALICE))
    assert r.status_code == 422 and "'1_6' is not a whole number" in r.json()["detail"]
    r = client.patch("/api/v1/labs/vision", json={"max_gpus": False}, headers=auth(ADMIN))
    assert r.status_code == 422 and r.json() == {"detail": "invalid max_gpus: false is not a whole number; give "
                                                 "digits only, such as 3"}, r.text


def test_a_number_in_a_path_or_query_is_read_only_as_written(client: AsgiClient) -> None:
    job_id = submit(client, gpus=1)["id"]
    assert client.get(f"/api/v1/jobs/{job_id}", headers=auth(ALICE)).status_code == 200
    spelt = "_".join(str(job_id))  # job 1 as '1', job 12 as '1_2': not a job id when it has an underscore
    for path in (f"/api/v1/jobs/{job_id}%20", f"/api/v1/jobs/+{job_id}", f"/api/v1/jobs/{spelt}_0"):
        r = client.get(path, headers=auth(ALICE))
        assert r.status_code == 422
        assert r.json()["detail"].endswith("is not a whole number; give digits only, such as 3")
    r = client.get(f"/api/v1/jobs/{'1' * 5000}", headers=auth(ALICE))  # more digits than Python's int converts
    assert r.status_code == 422 and r.json() == {"detail": f"invalid job_id: input should be less than or equal to "
                                                           f"{MAX_ID}"}
    r = post_job(client, gpus="9" * 5000)
    assert r.status_code == 422 and r.json() == {"detail": "invalid gpus: input should be less than or equal to 1024"}
    r = client.get("/api/v1/jobs?array=1_0", headers=auth(ALICE))
    assert r.json() == {"detail": "invalid array: '1_0' is not a whole number; give digits only, such as 3"}
    r = client.post(f"/api/v1/jobs/{spelt}_0/cancel", headers=auth(ALICE))
    assert r.status_code == 422
    assert client.get(f"/api/v1/jobs/{job_id}", headers=auth(ALICE)).json()["state"] != "cancelled"


def test_a_field_the_api_does_not_know_is_refused_not_dropped(client: AsgiClient) -> None:
    """A misspelt field would otherwise run a job other than the one asked for (1 GPU for `gpu: 3`)."""
    r = post_job(client, gpu=3, time_limit="1h")
    assert r.status_code == 422, r.text
    assert r.json() == {"detail": "unknown field 'gpu'; docs/api.md lists the fields this request takes"}
    assert client.get("/api/v1/jobs", headers=auth(ALICE)).json() == []
    job_id = submit(client, gpus=1)["id"]
    r = client.patch(f"/api/v1/jobs/{job_id}", json={"gpus": 2, "x" * 5000: 1}, headers=auth(ALICE))
    assert r.status_code == 422 and r.json()["detail"].startswith(f"unknown field {'x' * 40!r}... (5000 characters)")
    assert client.get(f"/api/v1/jobs/{job_id}", headers=auth(ALICE)).json()["gpus"] == 1
    for method, path, body in (("POST", "/api/v1/users", {"name": "carol", "unix_user": "carol", "lab": "vision"}),
                               ("PATCH", "/api/v1/labs/vision", {"guaranteed_gpu": 4})):
        r = client.request(method, path, json=body, headers=auth(ADMIN))
        assert r.status_code == 422 and r.json()["detail"].startswith("unknown field"), r.text


def test_a_query_parameter_the_route_does_not_take_is_refused(client: AsgiClient) -> None:
    """`GET /jobs?usr=bob` listed everyone's jobs: a script cancelling what it lists would cancel them all."""
    submit(client, gpus=1)
    r = client.get("/api/v1/jobs?usr=bob", headers=auth(ADMIN))
    assert r.status_code == 422
    assert r.json() == {"detail": "unknown query parameter 'usr'; this request takes all, array, lab, limit, state, "
                                  "user (docs/api.md)"}
    assert len(client.get("/api/v1/jobs?user=alice&state=pending", headers=auth(ADMIN)).json()) == 1
    for path in ("/api/v1/jobs/1?verbose=1", "/api/v1/usage?mnth=2026-12", "/api/v1/monitoring/idle?lab=x",
                 "/api/v1/labs?" + "q" * 3000 + "=1"):
        r = client.get(path, headers=auth(ADMIN))
        assert r.status_code == 422 and r.json()["detail"].startswith("unknown query parameter"), (path, r.text)
        assert len(r.json()["detail"]) < 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param({"gpus": 2**63}, "gpus", id="gpus-64-bit"),
        pytest.param({"priority": 2**64}, "priority", id="priority-huge"),
        pytest.param({"nodes": 5000}, "nodes", id="nodes"),
        pytest.param({"cpus": 10**9}, "cpus", id="cpus"),
        pytest.param({"memory_mb": 2**31}, "memory_mb", id="memory"),
        pytest.param({"time_limit_s": 3_000_000 * 86400}, "time_limit_s", id="time-3000000d"),
        pytest.param({"name": "n" * 129}, "name", id="long-name"),
        pytest.param({"command": ["x"] * 1001}, "command", id="too-many-arguments"),
        pytest.param({"command": ["echo", "a" * (64 << 10)]}, "command", id="64KiB-argument"),
        pytest.param({"env": {f"K{i}": "v" for i in range(257)}}, "env", id="too-many-variables"),
        pytest.param({"env": {"K": "v" * (64 << 10)}}, "env", id="64KiB-environment"),
    ],
)
def test_numbers_and_sizes_beyond_the_limits_are_422(client: AsgiClient, body: dict[str, Any], field: str) -> None:
    r = post_job(client, **body)
    assert r.status_code == 422 and r.json()["detail"].startswith(f"invalid {field}: "), r.text


@pytest.mark.parametrize("number", ["Infinity", "NaN", "-Infinity", "1e999"])
def test_nan_and_infinity_are_refused(client: AsgiClient, number: str) -> None:
    body = b'{"command": ["x"], "time_limit_s": %s}' % number.encode()
    r = client.post("/api/v1/jobs", content=body, headers={**auth(ALICE), "Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"].startswith("invalid time_limit_s: "), r.text
    r = client.patch(
        "/api/v1/labs/vision", content=b'{"weight": %s}' % number.encode(),
        headers={**auth(ADMIN), "Content-Type": "application/json"},
    )
    assert r.status_code == 422 and r.json()["detail"].startswith("invalid weight: "), r.text
    for field in ("batch_flag_s", "util_percent"):  # a number or "inherit": the sentence names the field alone
        r = client.patch(
            "/api/v1/monitoring/idle", content=b'{"%s": %s}' % (field.encode(), number.encode()),
            headers={**auth(ADMIN), "Content-Type": "application/json"},
        )
        assert r.status_code == 422 and r.json()["detail"].startswith(f"invalid {field}: "), r.text


def test_the_largest_limits_are_accepted(client: AsgiClient) -> None:
    got = submit(client, time_limit_s=365 * 86400, priority=100, command=["x"] * 1000, env={"K": "v" * 60_000})
    assert got["time_limit_s"] == 365 * 86400 and len(got["command"]) == 1000


def test_ids_in_paths_are_404_in_64_bits_and_422_beyond(client: AsgiClient) -> None:
    absent = (f"/api/v1/jobs/{MAX_ID}", f"/api/v1/jobs/{MAX_ID}/usage", f"/api/v1/jobs/{2**31 - 1}", "/api/v1/jobs/0")
    for path in absent:
        r = client.get(path, headers=auth(ALICE))
        assert r.status_code == 404 and r.json()["detail"].startswith("no job"), (path, r.text)
    r = client.post(f"/api/v1/jobs/{MAX_ID}/cancel", headers=auth(ALICE))
    assert r.status_code == 404
    for path in ("/api/v1/jobs/99999999999999999999", f"/api/v1/jobs/{MAX_ID + 1}/logs", "/api/v1/jobs/-1",
                 "/api/v1/jobs/abc", "/api/v1/jobs/1/logs?offset=99999999999999999999"):
        r = client.get(path, headers=auth(ALICE))
        assert r.status_code == 422 and r.json()["detail"].startswith("invalid "), (path, r.text)


@pytest.mark.parametrize(
    "params",
    [{"until": "9999-12-31"}, {"since": "0001-01-01"}, {"month": "9999-12"}, {"until": "9999-12-31T23:59:59"}],
)
def test_dates_out_of_range_are_422(client: AsgiClient, params: dict[str, str]) -> None:
    r = client.get("/api/v1/usage", params=params, headers=auth(ALICE))
    assert r.status_code == 422 and "out of range; give a date from 1970-01-01 to 2999-12-31" in r.json()["detail"]
    assert client.get("/api/v1/usage", params={"until": "2999-12-31"}, headers=auth(ALICE)).status_code == 200


def test_a_body_over_1_mib_is_413_before_any_route_reads_it(client: AsgiClient) -> None:
    big = json.dumps({"command": ["echo", "a" * MAX_BODY]}).encode()
    r = client.post("/api/v1/jobs", content=big, headers={**auth(ALICE), "Content-Type": "application/json"})
    assert r.status_code == 413
    assert r.json() == {"detail": "the request body is larger than 1 MiB; send less (docs/api.md lists the limits)"}

    async def chunks() -> Any:  # no Content-Length: the body is counted as it arrives
        yield b'{"command": ["echo", "'
        for _ in range(20):
            yield b"a" * (64 << 10)
        yield b'"]}'

    r = client.post("/api/v1/jobs", content=chunks(), headers={**auth(ALICE), "Content-Type": "application/json"})
    assert r.status_code == 413 and "larger than 1 MiB" in r.json()["detail"]
    assert client.get("/api/v1/jobs", headers=auth(ALICE)).json() == []


def test_rows_stored_before_the_limits_still_read_as_json(client: AsgiClient, ctx: ServerContext) -> None:
    """A job submitted with `--time 3000000d` (or Infinity) before the limits must not break GET /jobs."""
    huge, infinite = submit(client), submit(client)
    with ctx.db.write() as s:
        s.execute(update(JobRow).where(JobRow.id == huge["id"]).values(
            time_limit_s=3_000_000 * 86400.0, estimated_start=3_000_000 * 86400.0 * 2, name="n" * 255))
        s.execute(update(JobRow).where(JobRow.id == infinite["id"]).values(
            time_limit_s=float("inf"), estimated_start=float("inf")))
    r = client.get("/api/v1/jobs", headers=auth(ALICE))
    assert r.status_code == 200 and b"Infinity" not in r.content and b"NaN" not in r.content
    shown = {j["id"]: j for j in json.loads(r.content)}
    assert shown[huge["id"]]["time_limit_s"] == 3_000_000 * 86400 and shown[huge["id"]]["estimated_start"] is None
    assert shown[infinite["id"]]["time_limit_s"] is None and shown[infinite["id"]]["estimated_start"] is None
    r = client.get(f"/api/v1/jobs/{infinite['id']}", headers=auth(ALICE))
    assert r.status_code == 200 and json.loads(r.content)["time_limit_s"] is None
