"""The operator UI on one node (DESIGN.md "Operator UI", FL-117): the page and its assets are open and
carry no data; nothing is fetched from outside the node; every JSON route the page reads is guarded.

One real node process (``crewlet run`` on the embedded broker) serves the whole module; it is stopped
by PID in the fixture's finalizer.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from services.ingress.ui import ASSETS, STATIC
from tests.support.procs import TOKEN, Node, free_port


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """One ready node with every role on the embedded broker."""
    root = tmp_path_factory.mktemp("ui")
    port = free_port()
    n = Node(["run", "--data-dir", str(root / "data"), "--port", str(port)], dir=root / "node", port=port)
    try:
        n.wait_ready(60)
        yield n
    finally:
        n.stop()


class _Refs(HTMLParser):
    """Every ``src``/``href``/``action`` of a page, and whether it holds an inline script or handler."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str]] = []
        self.inline: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for k, v in attrs:
            if k in ("src", "href", "action") and v is not None:
                self.refs.append((tag, v))
            if k.startswith("on"):
                self.inline.append(f"{tag} {k}")
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline.append("script body")


def _page(node: Node) -> tuple[httpx.Response, _Refs]:
    r = httpx.get(node.url + "/ui/", timeout=5)
    refs = _Refs()
    refs.feed(r.text)
    return r, refs


def test_the_page_is_served_without_a_token(node: Node) -> None:
    r, refs = _page(node)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    for tab in ("Nodes", "Seats", "Turns", "Work"):
        assert f'data-tab="{tab.lower()}">{tab}</a>' in r.text
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp
    assert refs.inline == [], "inline scripts or handlers would need a looser CSP"
    # /ui without the slash leads to the page
    r = httpx.get(node.url + "/ui", timeout=5, follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/ui/"


def test_the_assets_are_served_and_nothing_else(node: Node) -> None:
    _, refs = _page(node)
    local = sorted({v for _, v in refs.refs if v.startswith("/ui/static/")})
    assert local == [f"/ui/static/{name}" for name in sorted(ASSETS)]
    for path in local:
        r = httpx.get(node.url + path, timeout=5)
        assert r.status_code == 200, path
        assert r.headers["content-type"].split(";")[0] == ASSETS[path.rsplit("/", 1)[1]].split(";")[0]
        assert r.content == (STATIC / path.rsplit("/", 1)[1]).read_bytes()
    for bad in ("index.htm", "..%2F__init__.py", "nope.js"):
        r = httpx.get(f"{node.url}/ui/static/{bad}", timeout=5)
        assert r.status_code == 404, bad
        assert r.json()["error"] == "not_found"


def test_no_url_leaves_the_node(node: Node) -> None:
    """No CDN, font or script from elsewhere: every reference is this node's (``/ui/...``) or a fragment."""
    r, refs = _page(node)
    for tag, ref in refs.refs:
        assert ref.startswith(("/ui/", "#")), f"<{tag}> refers to {ref!r}"
    texts = {"index.html": r.text}
    for name in ASSETS:
        if name.endswith((".js", ".css")):
            texts[name] = httpx.get(f"{node.url}/ui/static/{name}", timeout=5).text
    for name, text in texts.items():
        assert "://" not in text, f"{name} names an absolute URL"
        assert "@import" not in text and not re.search(r"url\(\s*['\"]?(?!/ui/)", text), name
    js = texts["app.js"]
    assert "innerHTML" not in js and "outerHTML" not in js and "insertAdjacentHTML" not in js
    assert "document.write" not in js and "eval(" not in js


def test_the_json_it_reads_needs_the_token(node: Node) -> None:
    """Every API path the script calls answers 401 without a token and with a wrong one, 200 with it."""
    js = (STATIC / "app.js").read_text()
    called = sorted(set(re.findall(r'api\(\s*[`"](/[^`"$]*)', js)))
    assert called == [
        "/agents/",
        "/events/trace/",
        "/fleet",
        "/fleet?inbox=true",
        "/turns?limit=50",
        "/work?limit=100",
    ]
    filled = {
        "/agents/": "/agents/lead/memory",
        "/events/trace/": "/events/trace/0af7651916cd43dd8448eb211c80319c",
    }
    for path in called:
        path = filled.get(path, path)
        assert node.get(path, token=None).status_code == 401, path
        assert node.get(path, token="wrong-token-wrong-token-wrong").status_code == 401, path
        r = node.get(path, token=TOKEN)
        assert r.status_code == 200, (path, r.text)
    view = node.get("/fleet?inbox=true").json()
    assert [n["id"] for n in view["nodes"]] == ["node-0"]
    assert view["nodes"][0]["renewed_at"]  # the last heartbeat the Nodes tab shows
    seats = {s["seat"] for s in view["seats"]} | set(view["unowned_seats"])
    assert seats and set(view["inboxes"]) == seats
    for seat, box in view["inboxes"].items():
        assert box is not None and set(box) == {"pending", "ack_pending", "redelivered"}, seat
        assert all(isinstance(v, int) and v >= 0 for v in box.values()), seat
    assert "inboxes" not in node.get("/fleet").json()  # the counters are asked only when wanted
    memory = node.get("/agents/lead/memory").json()  # the Seats tab's Memory panel (AG-9)
    assert memory["handle"] == "lead" and set(memory["personal_memories"]) == {"long", "short"}
    page = (STATIC / "index.html").read_text()
    assert 'id="memory-panel"' in page and 'id="memory-table"' in page


def test_the_page_ships_with_the_package() -> None:
    """The page and assets live beside the router (``services/ingress/ui/static``)."""
    assert (STATIC / "index.html").is_file()
    for name in ASSETS:
        assert (STATIC / name).is_file(), name
    assert Path(STATIC).parent.name == "ui"
