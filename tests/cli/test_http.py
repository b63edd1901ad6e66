"""The SDK's own URL and query handling reads and writes what `urllib.parse` does."""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

import pytest

from nanum._http import query, split_url


@pytest.mark.parametrize("url", ["http://127.0.0.1:8470", "http://Head:8765/", "https://gpu.example.org/nanum/",
                                 "http://[::1]:99/x", "http://user@h:1/", "http://h:0", "ftp://x", "no url"])
def test_server_urls_split_as_urlsplit_splits_them(url: str) -> None:
    parts = urlsplit(url)
    assert split_url(url) == (parts.scheme, parts.hostname, parts.port, parts.path)


def test_a_port_out_of_range_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        split_url("http://h:99999")


@pytest.mark.parametrize("params", [[("all", "true"), ("state", "pending"), ("state", "held")], {"offset": 5},
                                    [("user", "a b&c=d/é~")], {"s": ["x", "y"]}])
def test_queries_encode_as_urlencode_with_doseq(params: object) -> None:
    assert query(params) == urlencode(params, doseq=True)  # type: ignore[arg-type]


def test_large_and_chunked_answers_on_one_connection_arrive_whole_and_in_order() -> None:
    """A listing of many jobs is tens of megabytes, read in thousands of pieces: every byte arrives, and what
    follows it on the kept-alive connection (a chunked answer, split across reads) is read as its own answer."""
    import socket
    import threading

    from nanum._http import PlainConnection

    big = bytes(range(256)) * 40_000  # 10 MB
    chunks = [b"first part ", b"x" * 70_000, b" last"]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    answers = (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big) + big
               + b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            asked = b""
            while not asked.endswith(b"\r\n\r\n{}"):  # both requests first, then the answers in small pieces
                asked += conn.recv(65536)
            for at in range(0, len(answers), 4093):
                conn.sendall(answers[at:at + 4093])

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    connection = PlainConnection("127.0.0.1", listener.getsockname()[1], timeout=30)
    try:
        connection.request("GET", "/jobs")
        connection.request("POST", "/jobs", b"{}")
        first, second = connection.getresponse(), connection.getresponse()
    finally:
        connection.close()
        listener.close()
    assert (first.status, len(first.content), first.content == big) == (200, len(big), True)
    assert (second.status, second.content) == (201, b"".join(chunks))
