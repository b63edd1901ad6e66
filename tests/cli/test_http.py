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
