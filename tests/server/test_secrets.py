"""What the server keeps to the people it concerns: a job's environment (API keys live there) to its owner and
admins, and webhooks away from the server's own network (loopback, private, link-local) unless an admin allows."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from unittest import mock

import pytest

from nanum.server.context import ServerContext
from nanum.server.services import webhooks
from nanum.server.services.notify import _post
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth, submit
from tests.server.test_web import get, login

SECRET = {"WANDB_API_KEY": "wk-123", "HF_TOKEN": "hf-456"}


def test_a_jobs_environment_is_shown_only_to_its_owner_and_admins(client: AsgiClient) -> None:
    j = submit(client, ALICE, env=SECRET)
    assert j["env"] == SECRET
    for token, expected in ((ALICE, SECRET), (ADMIN, SECRET), (BOB, None)):
        shown = client.get(f"/api/v1/jobs/{j['id']}", headers=auth(token)).json()
        listed = client.get("/api/v1/jobs", params={"all": "true"}, headers=auth(token)).json()
        assert shown["env"] == expected and [x["env"] for x in listed] == [expected], token
        assert shown["command"] == ["python", "train.py"]  # the rest stays visible to everyone
    r = client.get(f"/api/v1/jobs/{j['id']}", headers=auth(BOB))
    assert b"wk-123" not in r.content and b"WANDB_API_KEY" not in r.content


def test_the_dashboard_does_not_show_another_users_environment(client: AsgiClient) -> None:
    j = submit(client, ALICE, env=SECRET)
    cookies = login(client, BOB)
    for path in (f"/jobs/{j['id']}", f"/ui/jobs/{j['id']}.json"):
        r = get(client, path, cookies)
        assert r.status_code == 200 and "wk-123" not in r.text and "WANDB_API_KEY" not in r.text, path


# -- webhooks ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "message"),
    [
        pytest.param("http://127.0.0.1:8765/hook", "webhook host 127.0.0.1 is a loopback address", id="loopback"),
        pytest.param("http://localhost/hook", "webhook host localhost (127.0.0.1) is a loopback address",
                     id="localhost"),
        pytest.param("http://[::1]/hook", "webhook host ::1 is a loopback address", id="ipv6-loopback"),
        pytest.param("http://10.0.0.5/hook", "webhook host 10.0.0.5 is a private address", id="private"),
        pytest.param("http://169.254.169.254/latest/meta-data", "webhook host 169.254.169.254 is a link-local address",
                     id="cloud-metadata"),
        pytest.param("http://0.0.0.0/", "webhook host 0.0.0.0 is an unspecified address", id="unspecified"),
        pytest.param("http://[::ffff:127.0.0.1]/", "is a loopback address", id="ipv4-mapped"),
        pytest.param("http://[::1/hook", "is not a well-formed URL", id="unclosed-ipv6"),
    ],
)
def test_webhooks_to_the_servers_own_network_are_refused(client: AsgiClient, url: str, message: str) -> None:
    r = client.request("PUT", "/api/v1/users/alice/contact", json={"webhook": url}, headers=auth(ALICE))
    assert r.status_code == 422 and message in r.json()["detail"], r.text
    r = client.patch("/api/v1/monitoring/notify", json={"webhook_url": url}, headers=auth(ADMIN))
    assert r.status_code == 422 and message in r.json()["detail"], r.text
    assert client.get("/api/v1/monitoring/notify", headers=auth(ADMIN)).json()["webhook_url"] is None


def test_the_refusal_says_how_an_admin_allows_the_host(client: AsgiClient, ctx: ServerContext) -> None:
    body = {"webhook": "http://127.0.0.1:9000/hook"}
    r = client.request("PUT", "/api/v1/users/alice/contact", json=body, headers=auth(ALICE))
    assert r.json()["detail"] == (
        "webhook host 127.0.0.1 is a loopback address; an admin can allow it with "
        "`nanum up --webhook-allow-host 127.0.0.1`"
    )
    ctx.settings = dataclasses.replace(ctx.settings, webhook_allow_hosts=frozenset({"127.0.0.1"}))
    r = client.request("PUT", "/api/v1/users/alice/contact", json=body, headers=auth(ALICE))
    assert r.status_code == 200, r.text
    public = {"webhook": "https://93.184.216.34/hook"}
    r = client.request("PUT", "/api/v1/users/alice/contact", json=public, headers=auth(ALICE))
    assert r.status_code == 200, r.text


class Receiver:
    """A webhook receiver on loopback that counts what reaches it."""

    def __init__(self) -> None:
        self.hits = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                receiver.hits += 1
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.httpd.shutdown()
    found.httpd.server_close()


def test_a_host_that_now_resolves_to_loopback_is_refused_at_send_time(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """The name was public when the URL was set; by the time a notice goes out it points at the server."""
    url = f"http://hooks.example.com:{receiver.port}/hook"
    public = [(2, 1, 6, "", ("93.184.216.34", receiver.port))]
    rebound = [(2, 1, 6, "", ("127.0.0.1", receiver.port))]
    with mock.patch("socket.getaddrinfo", return_value=public):
        webhooks.check_url(url, frozenset())  # accepted when set
    with mock.patch("socket.getaddrinfo", return_value=rebound), caplog.at_level(logging.WARNING, "nanum.server"):
        _post(url, {"text": "hello"}, frozenset())
    assert receiver.hits == 0
    assert "webhook host hooks.example.com (127.0.0.1) is a loopback address" in caplog.text
    with mock.patch("socket.getaddrinfo", return_value=rebound):
        _post(url, {"text": "hello"}, frozenset({"hooks.example.com"}))  # allowed: sent to the checked address
    assert receiver.hits == 1


def test_a_webhook_that_redirects_is_not_followed(receiver: Receiver) -> None:
    class Redirect(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(307)
            self.send_header("Location", f"http://127.0.0.1:{receiver.port}/hook")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        status = webhooks.post(f"http://127.0.0.1:{httpd.server_address[1]}/", b"{}", {"127.0.0.1"}, 5.0)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert status == 307 and receiver.hits == 0
