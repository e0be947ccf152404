"""``/docs`` and ``/redoc`` work without internet (issue 38): every script, style and icon the pages
load is served by the node itself from the installed package; no page names another host."""

from __future__ import annotations

import re

from fastapi import FastAPI
from fastapi.testclient import TestClient

from crewlet._offline_docs import mount_offline_docs


def test_docs_pages_load_only_local_assets() -> None:
    app = FastAPI(title="t", docs_url=None, redoc_url=None)
    mount_offline_docs(app)
    client = TestClient(app)
    for page in ("/docs", "/redoc"):
        r = client.get(page)
        assert r.status_code == 200
        urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", r.text) + re.findall(
            r"url: '([^']+)'", r.text
        )
        assert urls, r.text
        assert not [u for u in urls if u.startswith(("http:", "https:", "//"))], urls
        for u in urls:
            if u.startswith("/docs-static/"):
                got = client.get(u)
                assert got.status_code == 200 and len(got.content) > 1000, u
    assert "SwaggerUIBundle" in client.get("/docs-static/swagger-ui-bundle.js").text[:5_000_000]


def test_only_the_named_assets_are_served() -> None:
    app = FastAPI(title="t", docs_url=None, redoc_url=None)
    mount_offline_docs(app)
    client = TestClient(app)
    assert client.get("/docs-static/METADATA").status_code == 404
    assert client.get("/docs-static/..%2F__init__.py").status_code == 404
    assert client.get("/docs/oauth2-redirect").status_code == 200
