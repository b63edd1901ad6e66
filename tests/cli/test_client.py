"""The Python SDK against a scripted transport: requests it sends, errors it raises, waiting, logs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import pytest

from nanum.client import ApiError, Client, NanumError, ServerUnreachable, WaitTimeout, resolve_settings
from nanum.config import save_credentials
from tests.cli.fakeapi import job

Handler = Callable[[httpx.Request], httpx.Response]


def client(handler: Handler) -> Client:
    return Client("http://nanum.test:8470/", "tok", transport=httpx.MockTransport(handler))


def test_submit_posts_the_command_and_only_the_fields_given() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json=job(id=9))

    with client(handler) as nanum:
        created = nanum.submit(["python", "train.py"], gpus=2, time_limit_s=600)
    assert created["id"] == 9
    assert seen[0].url == "http://nanum.test:8470/api/v1/jobs"
    assert seen[0].headers["Authorization"] == "Bearer tok"
    sent = json.loads(seen[0].content)
    assert len(sent.pop("client_request_id")) == 32
    assert sent == {"command": ["python", "train.py"], "gpus": 2, "time_limit_s": 600}


def test_a_name_is_one_path_segment_and_one_that_would_change_the_path_is_never_sent() -> None:
    seen: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path)
        return httpx.Response(404, json={"detail": "no node named that"})

    with client(handler) as nanum:
        with pytest.raises(ApiError):
            nanum.node("a?b#c d")
        for name in ("../users/bob", "..", ".", "", "gpu-01/drain"):
            with pytest.raises(NanumError, match="cannot be a name"):
                nanum.remove_node(name)
            with pytest.raises(ValueError):
                nanum.lab(name)
    assert seen == [b"/api/v1/nodes/a%3Fb%23c%20d"]


def test_a_submit_that_got_no_answer_is_sent_again_with_the_same_request_id() -> None:
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        if len(seen) == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        if len(seen) == 2:
            raise httpx.ReadTimeout("timed out")
        return httpx.Response(200, json=job(id=9))

    with client(handler) as nanum:
        assert nanum.submit(["python", "train.py"])["id"] == 9
        nanum.submit(["python", "train.py"])
    assert len(seen) == 4
    assert seen[0]["client_request_id"] == seen[1]["client_request_id"] == seen[2]["client_request_id"]
    assert seen[3]["client_request_id"] != seen[0]["client_request_id"]  # a new submission, a new id


def test_job_filters_become_query_parameters() -> None:
    seen: list[httpx.URL] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url)
        return httpx.Response(200, json=[])

    with client(handler) as nanum:
        nanum.jobs()
        nanum.jobs(all=True, user="bob", lab="nlp", state=["pending", "held"])
    assert seen[0].query == b""
    assert seen[1].params.multi_items() == [("all", "true"), ("user", "bob"), ("lab", "nlp"),
                                            ("state", "pending"), ("state", "held")]


@pytest.mark.parametrize(
    ("status", "body", "detail"),
    [
        pytest.param(400, {"detail": "needs 64 GPUs on one node; the largest node has 4 (local)"},
                     "needs 64 GPUs on one node; the largest node has 4 (local)", id="refused"),
        pytest.param(422, {"detail": [{"loc": ["body", "gpus"], "msg": "Input should be >= 0"}]},
                     "gpus: Input should be >= 0", id="validation-list"),
        pytest.param(500, None, "the server at http://nanum.test:8470 answered 500 Internal Server Error to GET "
                     "/api/v1/jobs/1; its log, or that of a proxy in front of it, says why", id="no-json"),
        pytest.param(502, "<html><body><h1>502 Bad Gateway</h1></body></html>",
                     "the server at http://nanum.test:8470 answered 502 Bad Gateway to GET /api/v1/jobs/1; its log, "
                     "or that of a proxy in front of it, says why", id="a-proxy's-page"),
        pytest.param(503, "upstream connect error", "the server at http://nanum.test:8470 answered 503 Service "
                     "Unavailable to GET /api/v1/jobs/1 (upstream connect error); its log, or that of a proxy in "
                     "front of it, says why", id="a-proxy's-line"),
        pytest.param(404, "", "the server at http://nanum.test:8470 answered 404 Not Found to GET /api/v1/jobs/1, "
                     "which is not how nanum answers; is http://nanum.test:8470 a nanum server? (NANUM_SERVER, "
                     "`nanum login`)", id="not-nanum"),
        pytest.param(404, {"detail": "no job 1"}, "no job 1", id="nanum's-404"),
        pytest.param(400, {"detail": ["odd", 3]}, "odd; 3", id="a-list-of-anything"),
        pytest.param(400, {"detail": "two\nlines and \x1b[2J a terminal escape"},
                     "two lines and  [2J a terminal escape", id="control-characters"),
        pytest.param(404, "not\x1b[31m nanum", "the server at http://nanum.test:8470 answered 404 Not Found to GET "
                     "/api/v1/jobs/1, which is not how nanum answers; is http://nanum.test:8470 a nanum server? "
                     "(NANUM_SERVER, `nanum login`)", id="escapes-are-not-quoted"),
    ],
)
def test_refusals_raise_api_error_with_one_line(status: int, body: object, detail: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body) if body is not None else httpx.Response(status)

    with client(handler) as nanum, pytest.raises(ApiError) as err:
        nanum.job(1)
    assert (err.value.status, err.value.detail) == (status, detail)


def test_a_proxy_whose_server_is_down_is_failed_over_like_a_server_that_does_not_answer() -> None:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.host)
        if request.url.host == "head1":  # nginx in front of a stopped nanum
            return httpx.Response(502, text="<html><body><h1>502 Bad Gateway</h1></body></html>")
        return httpx.Response(200, json=job(id=1))

    with Client("http://head1:8765,http://head2:8765", "tok", transport=httpx.MockTransport(handler)) as nanum:
        assert nanum.job(1)["id"] == 1 and nanum.server == "http://head2:8765"
        nanum.job(1)  # the one that answered keeps the requests
    assert asked == ["head1", "head2", "head2"]

    def both_down(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text="no healthy upstream")

    with (Client("http://head1:8765,http://head2:8765", "tok", transport=httpx.MockTransport(both_down)) as nanum,
          pytest.raises(ApiError) as err):
        nanum.job(1)
    assert err.value.detail == ("the server at http://head2:8765 answered 503 Service Unavailable to GET "
                                "/api/v1/jobs/1 (no healthy upstream); its log, or that of a proxy in front of it, "
                                "says why")


def test_an_unreachable_server_says_how_to_start_one() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with client(handler) as nanum, pytest.raises(ServerUnreachable) as err:
        nanum.me()
    assert str(err.value) == ("cannot reach the nanum server at http://nanum.test:8470; "
                              "is `nanum up` running?")
    assert isinstance(err.value, ConnectionError)


def test_wait_returns_the_finished_job_and_rides_out_a_restart() -> None:
    answers = iter(["running", "down", "proxy", "running", "completed"])

    def handler(request: httpx.Request) -> httpx.Response:
        state = next(answers)
        if state == "down":
            raise httpx.ConnectError("refused", request=request)
        if state == "proxy":  # a proxy in front of the server, while it restarts
            return httpx.Response(502, text="<html>502 Bad Gateway</html>")
        return httpx.Response(200, json=job(state=state, exit_code=0 if state == "completed" else None))

    with client(handler) as nanum:
        done = nanum.wait(7, timeout=10, poll_s=0.01)
    assert (done["state"], done["exit_code"]) == ("completed", 0)


def test_wait_gives_up_after_its_timeout() -> None:
    with client(lambda r: httpx.Response(200, json=job(state="pending"))) as nanum, \
            pytest.raises(WaitTimeout, match=r"job 7 is still pending after 0\.2 s"):
        nanum.wait(7, timeout=0.2, poll_s=0.05)


def test_wait_array_waits_for_every_task_and_its_timeout_names_the_task_as_ps_does() -> None:
    """Each look asks for the tasks not ended; the ended ones are read once, at the end."""
    polls = iter([("running", "running"), ("completed", "running"), ("completed", "failed")])
    states: tuple[str, ...] = ()
    full_reads = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal states, full_reads
        assert request.url.params["array"] == "7"
        wanted = request.url.params.get_list("state")
        if wanted:
            states = next(polls, ("completed", "pending"))
        else:
            full_reads += 1
        tasks = [job(id=7 + i, state=state, array_id=7, array_task=i) for i, state in enumerate(states)]
        return httpx.Response(200, json=[t for t in tasks if not wanted or t["state"] in wanted])

    with client(handler) as nanum:
        assert [t["state"] for t in nanum.wait_array(7, timeout=10, poll_s=0.01)] == ["completed", "failed"]
        assert full_reads == 1
        with pytest.raises(WaitTimeout, match=r"job 7_1 is still pending after 0\.1 s"):
            nanum.wait_array(7, timeout=0.1, poll_s=0.02)


def test_logs_page_by_offset_and_follow_stops_once_the_job_ended() -> None:
    text = b"epoch 1\nepoch 2\n"

    def handler(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params["offset"])
        chunk = text[offset: offset + 8]
        state = "running" if offset < 8 else "completed"
        return httpx.Response(200, content=chunk, headers={
            "X-Nanum-Log-Offset": str(offset + len(chunk)), "X-Nanum-Job-State": state})

    with client(handler) as nanum:
        first = nanum.logs(7)
        assert (first.text, first.offset, first.state) == ("epoch 1\n", 8, "running")
        assert "".join(nanum.follow_logs(7, poll_s=0.01, settle_s=0.05)) == "epoch 1\nepoch 2\n"


def test_following_an_ended_job_waits_for_the_output_its_node_has_not_sent_while_some_comes() -> None:
    held = {"now": b"epoch 1\n"}  # what the server holds; the node has 8 bytes more

    def handler(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params["offset"])
        chunk = held["now"][offset:]
        missing = 16 - len(held["now"])
        headers = {"X-Nanum-Log-Offset": str(offset + len(chunk)), "X-Nanum-Job-State": "completed"}
        return httpx.Response(200, content=chunk, headers={**headers, "X-Nanum-Log-Missing": str(missing)}
                              if missing else headers)

    with client(handler) as nanum:
        assert nanum.logs(7).missing == 8
        chunks = nanum.follow_log_chunks(7, poll_s=0.01, settle_s=0.5)
        assert next(chunks).text == "epoch 1\n"
        held["now"] = b"epoch 1\nepoch 2\n"  # the node's next heartbeat brought the rest
        assert [(c.text, c.missing) for c in chunks] == [("epoch 2\n", 0), ("", 0)]
        held["now"] = b"epoch 1\n"  # a node that stopped sending: waited for `settle_s`, then given up on
        began = time.monotonic()
        assert [(c.text, c.missing) for c in nanum.follow_log_chunks(7, poll_s=0.01, settle_s=0.3)] == \
            [("epoch 1\n", 8), ("", 8)]
        assert time.monotonic() - began >= 0.3


def test_settings_come_from_arguments_then_environment_then_the_saved_file(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_settings() == (None, None)
    save_credentials("http://saved:1", "saved-token")
    assert resolve_settings() == ("http://saved:1", "saved-token")
    monkeypatch.setenv("NANUM_SERVER", "http://env:2")
    assert resolve_settings() == ("http://env:2", None)  # a saved token is only sent to its own server
    monkeypatch.setenv("NANUM_TOKEN", "env-token")
    assert resolve_settings() == ("http://env:2", "env-token")
    assert resolve_settings("http://flag:3", "flag-token") == ("http://flag:3", "flag-token")
    monkeypatch.delenv("NANUM_TOKEN")
    assert resolve_settings("http://saved:1/") == ("http://saved:1/", "saved-token")


def test_a_token_saved_for_two_servers_goes_to_either_and_never_to_another(monkeypatch: pytest.MonkeyPatch) -> None:
    save_credentials("http://head1:8765,http://head2:8765", "saved-token")
    for given in ("http://head2:8765", "http://head2:8765/, http://head1:8765", "http://head1:8765"):
        monkeypatch.setenv("NANUM_SERVER", given)
        assert resolve_settings() == (given, "saved-token")
    for given in ("http://evil:80,http://head1:8765", "http://head3:8765", " , "):
        monkeypatch.setenv("NANUM_SERVER", given)
        assert resolve_settings() == (given, None)


def test_the_sdk_exports_exactly_its_public_names() -> None:
    import types

    import nanum.client
    import nanum.jobfields

    public = {n for n, v in vars(nanum.client).items()
              if not n.startswith("_") and n != "TYPE_CHECKING" and not isinstance(v, types.ModuleType)
              and getattr(v, "__module__", "nanum.client") == "nanum.client"}
    job_fields = {"Allocation", "Job", "JobChanges", "Segment", "SubmitFields"}  # declared once, in nanum.jobfields
    assert set(nanum.client.__all__) == public | job_fields
    assert all(getattr(nanum.client, n) is getattr(nanum.jobfields, n) for n in job_fields)
    with pytest.raises(AttributeError):
        nanum.client.Jobs  # noqa: B018 - a name it does not have is still an AttributeError


def test_the_sdk_loads_no_job_declarations_and_no_pydantic_until_asked() -> None:
    """`nanum ps`, `show` and `cancel` import the SDK and must start fast: a job's TypedDicts are types only."""
    import subprocess
    import sys

    code = ("import sys, nanum.client; print('nanum.jobfields' in sys.modules, 'pydantic' in sys.modules); "
            "nanum.client.Job; print('nanum.jobfields' in sys.modules, 'pydantic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "True", "False"]
