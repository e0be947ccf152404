"""Every route the app registers, walked for auth (CO-27 "Check", issue 17).

The routes come from the app itself: :func:`crewlet.node.build_app` over the same node file, built in
this process (no server, no broker), every route of every included router, hidden ones too (the probes'
trailing-slash twins, ``/metrics``, the UI). Each must have a decision in :data:`DECISIONS`, so a new
route without one fails :func:`test_every_route_has_a_decision`. The decisions are then tried on a
real node started from that node file, with tokens that hold every grant, none, and every grant but
one:

- a route that asks a grant answers 401 ``unauthorized`` without a token and with an unknown one,
  403 ``forbidden`` naming the grant with a token holding every grant but that one, and neither 401
  nor 403 with a token holding it;
- a listed exception (:class:`Open`) answers neither 401 nor 403 without a token: the probes, the
  OpenAPI pages, ``/metrics`` and the operator UI's static files (no data; the page calls the
  guarded routes with the operator's token); a signed webhook (:class:`Signed`) refuses a request
  without its signature 401 whatever API token it carries: an API token is not a signature.

Requests carry no body, so a write that passes the guard is refused by its own validation (400/422)
and changes nothing; path parameters name nothing that exists (404), except where noted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import iter_route_contexts

from tests.support.procs import REPO, TOKEN, Node, free_port, node_file


@dataclass(frozen=True)
class Open:
    """Served without a token: ``why`` says what makes that safe."""

    why: str


@dataclass(frozen=True)
class Signed:
    """A webhook: authenticated by the sender's signature over the body, never by an API token (CO-9, CO-35)."""

    why: str


Decision = str | Open | Signed
"""A grant name (``state:read``, ...), or a listed exception."""

_PROBE = Open("a probe: liveness and readiness for the orchestrator (FL-126..FL-128)")
_DOCS = Open("the OpenAPI document and its pages: the API's shape, no data")
_UI = Open("the operator UI's static page and assets: no data; its script calls the guarded routes")

DECISIONS: dict[tuple[str, str], Decision] = {
    ("GET", "/health"): _PROBE,
    ("GET", "/health/"): _PROBE,
    ("GET", "/ready"): _PROBE,
    ("GET", "/ready/"): _PROBE,
    ("GET", "/openapi.json"): _DOCS,
    ("GET", "/docs"): _DOCS,
    ("GET", "/docs/oauth2-redirect"): _DOCS,
    ("GET", "/redoc"): _DOCS,
    ("GET", "/docs-static/{name}"): _DOCS,
    ("GET", "/metrics"): Open(
        "Prometheus scrapes every node without a token (issue 15): counters, no content"
    ),
    ("GET", "/ui"): _UI,
    ("GET", "/ui/"): _UI,
    ("GET", "/ui/static/{name}"): _UI,
    ("POST", "/webhooks/inbound/{source}"): Signed("the source's HMAC signature header (CO-9)"),
    ("POST", "/webhooks/github"): Signed("X-Hub-Signature-256 (CO-35)"),
    ("GET", "/fleet"): "state:read",
    ("GET", "/fleet/broker"): "state:read",
    ("POST", "/fleet/broker/remove/{node}"): "fleet:operate",
    ("POST", "/fleet/broker/remove-peer/{peer}"): "fleet:operate",
    ("GET", "/config"): "config:read",
    ("PUT", "/config"): "config:write",
    ("PUT", "/config/roles/{handle}"): "config:write",
    ("PUT", "/config/units/{unit_id}"): "config:write",
    ("PUT", "/config/llm-providers/{key}"): "config:write",
    ("PUT", "/config/mcp-servers/{name}"): "config:write",
    ("POST", "/config/revisions/{revision_id}/revert"): "config:write",
    ("GET", "/config/revisions"): "config:read",
    ("GET", "/config/revisions/{revision_id}"): "config:read",
    ("GET", "/config/revisions/{revision_id}/diff"): "config:read",
    ("POST", "/config/revisions/{revision_id}/activate"): "config:write",
    ("POST", "/seats/{handle}/messages"): "work:write",
    ("GET", "/messages/{message_id}"): "state:read",
    ("GET", "/turns"): "audit:read",
    ("GET", "/turns/{turn_id}"): "audit:read",
    ("GET", "/tokens/breakdown"): "state:read",
    ("GET", "/usage"): "state:read",
    ("GET", "/agents/{handle}/memory"): "audit:read",
    ("GET", "/work"): "state:read",
    ("GET", "/work/catalogue"): "state:read",
    ("GET", "/projects"): "state:read",
    ("GET", "/work/{key}"): "state:read",
    ("POST", "/work"): "work:write",
    ("PATCH", "/work/{key}"): "work:write",
    ("POST", "/work/{key}/comments"): "work:write",
    ("GET", "/knowledge/search"): "state:read",
    ("GET", "/knowledge/spaces"): "state:read",
    ("GET", "/knowledge/pages"): "state:read",
    ("GET", "/knowledge/pages/{page_id}"): "state:read",
    ("POST", "/knowledge/pages"): "knowledge:write",
    ("PUT", "/knowledge/pages/{page_id}"): "knowledge:write",
    ("GET", "/projects/{key}/files"): "state:read",
    ("GET", "/projects/{key}/files/{path}"): "state:read",
    ("PUT", "/projects/{key}/files/{path}"): "work:write",
    ("GET", "/events"): "audit:read",
    ("GET", "/events/trace/{trace_id}"): "audit:read",
    ("GET", "/events/{event_id}"): "audit:read",
    ("POST", "/backup"): "fleet:operate",
    ("GET", "/backups"): "state:read",
    ("GET", "/estate"): "state:read",
    ("GET", "/secrets"): "secrets:read",
    ("POST", "/secrets/rekey"): "secrets:write",
    ("PUT", "/secrets/{name}"): "secrets:write",
    ("DELETE", "/secrets/{name}"): "secrets:write",
    ("GET", "/secrets/{name}"): "secrets:read",
    ("POST", "/retention/ack"): "fleet:operate",
    ("POST", "/retention/evict"): "fleet:operate",
    ("POST", "/retention/readmit"): "fleet:operate",
    ("GET", "/budgets"): "state:read",
    ("POST", "/budgets/reset"): "config:write",
    ("GET", "/schedules"): "state:read",
    ("GET", "/objects"): "state:read",
}
"""Every route's auth decision, by ``(method, path pattern)``: CO-27's table, plus the routes added since."""

GRANTS = (
    "state:read",
    "audit:read",
    "config:read",
    "secrets:read",
    "work:write",
    "knowledge:write",
    "config:write",
    "secrets:write",
    "fleet:operate",
    "people:manage",
    "sandbox:run",
)
"""CO-27's grants."""

WEBHOOK_SECRET = "auth-walk-webhook-secret-0123456789"
FILL = {"source": "forms", "name": "AUTH_WALK_X", "key": "SUP", "path": "a.txt", "handle": "founder"}
"""Path parameters: a configured webhook source, names that exist nowhere else (a 404 past the guard)."""


def _but(grant: str) -> str:
    """The token holding every grant but ``grant`` (at least 26 characters, CO-27)."""
    return f"token-all-but-{grant.replace(':', '-')}-0123456789abcdef"


NONE = "token-holding-no-grant-0123456789abcdef"


def _file(d: Path, port: int) -> Path:
    tokens = [{"id": "full", "token": TOKEN}, {"id": "none", "token": NONE, "grants": []}]
    tokens += [{"id": f"but-{g}", "token": _but(g), "grants": [x for x in GRANTS if x != g]} for g in GRANTS]
    return node_file(d, node_id="auth-0", port=port, api={"auth": {"tokens": tokens}})


@pytest.fixture(scope="module")
def routes(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Any]:
    """``(method, path pattern) → route`` of the app :func:`crewlet.node.build_app` builds for the node file."""
    from crewlet.node import build_app, load_roles
    from shared.config import load_node_file
    from shared.runtime import NodeContext

    d = tmp_path_factory.mktemp("auth-routes")
    cfg, _ = load_node_file(str(_file(d, 1)), env={"CREWLET_API_TOKEN": TOKEN})
    ctx = NodeContext(cfg)
    app = build_app(ctx, load_roles(ctx))
    out: dict[tuple[str, str], Any] = {}
    for route in iter_route_contexts(app.routes):
        methods = set(route.methods or ())
        if "GET" in methods:
            methods.discard("HEAD")  # Starlette's twin of a GET
        for method in methods:
            out[(method, str(route.path_format))] = route
    return out


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    d = tmp_path_factory.mktemp("auth-node")
    port = free_port()
    path = _file(d, port)
    env = {"GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET, "FORMS_WEBHOOK_SECRET": WEBHOOK_SECRET}
    company = REPO / "examples" / "company.yaml"
    n = Node(["node", "--node", str(path), "--company", str(company)], dir=d, port=port, env=env)
    try:
        n.wait_ready(60)
        yield n
    finally:
        n.stop()


def _url(path: str) -> str:
    if path == "/ui/static/{name}":
        return "/ui/static/app.js"
    if path == "/docs-static/{name}":
        return "/docs-static/swagger-ui.css"
    return re.sub(r"\{([^}]+)\}", lambda m: FILL.get(m.group(1), "X1"), path)


def _send(client: httpx.Client, method: str, path: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return client.request(method, _url(path), headers=headers)


def test_every_route_has_a_decision(routes: dict[tuple[str, str], Any]) -> None:
    """A route added without a decision here fails; so does a decision for a route that is gone."""
    missing = sorted(set(routes) - set(DECISIONS))
    stale = sorted(set(DECISIONS) - set(routes))
    assert not missing, f"routes without an auth decision (add them to DECISIONS): {missing}"
    assert not stale, f"decisions for routes the app no longer has: {stale}"


def test_the_running_node_serves_the_routes_walked(routes: dict[tuple[str, str], Any], node: Node) -> None:
    """The in-process app and the node agree: every operation of the node's OpenAPI is a route walked."""
    doc = httpx.get(node.url + "/openapi.json", timeout=10).json()
    served = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert served <= set(routes), sorted(served - set(routes))
    assert doc["paths"]["/work"]["get"]["x-grant"] == "state:read"


def test_a_guarded_route_refuses_without_its_grant(node: Node) -> None:
    """401 with no token or an unknown one; 403 naming the grant with every grant but the route's;
    neither with the grant."""
    wrong: list[str] = []
    walked = 0
    with httpx.Client(base_url=node.url, timeout=30) as client:
        for (method, path), decision in sorted(DECISIONS.items()):
            if not isinstance(decision, str):
                continue
            walked += 1
            for token, want in (
                (None, 401),
                ("not-a-token-of-this-node-0123456789", 401),
                (_but(decision), 403),
            ):
                r = _send(client, method, path, token)
                code = "unauthorized" if want == 401 else "forbidden"
                if r.status_code != want or r.json().get("error") != code:
                    wrong.append(
                        f"{method} {path} token={token!r}: {r.status_code} {r.text[:160]}, not {want}"
                    )
                elif want == 403 and decision not in str(r.json().get("detail")):
                    wrong.append(f"{method} {path}: the 403 does not name {decision}: {r.text[:160]}")
                elif want == 401 and not r.headers.get("www-authenticate", "").startswith("Bearer"):
                    wrong.append(f"{method} {path}: the 401 has no WWW-Authenticate: Bearer challenge")
            r = _send(client, method, path, TOKEN)
            if r.status_code in (401, 403):
                wrong.append(f"{method} {path} with {decision}: {r.status_code} {r.text[:160]}")
    assert walked >= 50, walked
    assert not wrong, "\n".join(wrong)


def test_a_token_without_grants_opens_nothing_guarded(node: Node) -> None:
    """A token the node knows but that holds no grant is refused 403 on every guarded route."""
    with httpx.Client(base_url=node.url, timeout=30) as client:
        refused = {
            (m, p): _send(client, m, p, NONE).status_code
            for (m, p), d in DECISIONS.items()
            if isinstance(d, str)
        }
    assert set(refused.values()) == {403}, {k: v for k, v in refused.items() if v != 403}


def test_the_listed_exceptions_answer_without_a_token(node: Node) -> None:
    """Probes, the OpenAPI pages, /metrics and the UI answer without a token; a webhook without its
    signature is refused 401 even when it carries a valid API token."""
    wrong: list[str] = []
    with httpx.Client(base_url=node.url, timeout=30) as client:
        for (method, path), decision in sorted(DECISIONS.items()):
            if isinstance(decision, Open):
                r = _send(client, method, path, None)
                if r.status_code >= 400:
                    wrong.append(
                        f"{method} {path}: {r.status_code} without a token ({decision.why}): {r.text[:120]}"
                    )
            elif isinstance(decision, Signed):
                for token in (None, TOKEN):
                    r = _send(client, method, path, token)
                    if r.status_code != 401:
                        wrong.append(
                            f"{method} {path} token={token!r}: {r.status_code} {r.text[:160]}, not 401"
                        )
    assert not wrong, "\n".join(wrong)


def test_the_caller_is_refused_before_the_request_shape(node: Node) -> None:
    """Issue 38: an unknown query parameter (``GET /work?stauts=x``) or a body that is not JSON,
    sent without a token, answers 401 like any other request, not a 400 describing the route;
    with a token lacking the grant it answers 403."""
    wrong: list[str] = []
    walked = 0
    with httpx.Client(base_url=node.url, timeout=30) as client:
        for (method, path), decision in sorted(DECISIONS.items()):
            if not isinstance(decision, str):
                continue
            walked += 1
            body = b"{not json" if method in ("POST", "PUT", "PATCH") else None
            for token, want in ((None, 401), (_but(decision), 403)):
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                if body is not None:
                    headers["Content-Type"] = "application/json"
                r = client.request(method, _url(path), params={"stauts": "x"}, content=body, headers=headers)
                if r.status_code != want:
                    wrong.append(f"{method} {path}?stauts=x token={token!r}: {r.status_code} {r.text[:160]}")
            r = client.request(
                method, _url(path), params={"stauts": "x"}, headers={"Authorization": f"Bearer {TOKEN}"}
            )
            if r.status_code in (401, 403):
                wrong.append(f"{method} {path}?stauts=x with {decision}: {r.status_code} {r.text[:160]}")
    r = httpx.get(node.url + "/work", params={"stauts": "x"}, timeout=30)
    assert (r.status_code, r.json()["error"]) == (401, "unauthorized"), r.text
    assert "status" not in r.text
    assert walked >= 50, walked
    assert not wrong, "\n".join(wrong)
