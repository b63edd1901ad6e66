"""/docs works without internet: the page and everything it loads come from this server."""

from __future__ import annotations

import re

from tests.server.asgiclient import AsgiClient


def test_docs_load_nothing_from_another_site(client: AsgiClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200 and "swagger-ui" in page.text
    assert "http://" not in page.text and "https://" not in page.text and "cdn" not in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    loaded = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert {"/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css", "/docs/start.js"} <= set(loaded)
    for path in loaded:
        r = client.get(path)
        assert r.status_code == 200 and r.content, path
    assert '"/openapi.json"' in client.get("/docs/start.js").text
    assert client.get("/openapi.json").json()["info"]["title"] == "nanum"
