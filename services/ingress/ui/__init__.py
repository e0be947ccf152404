"""The operator web UI at ``/ui/`` on every ``ingress`` node (DESIGN.md "Operator UI"; FL-117, FL-152).

One HTML page and its static assets, no build step and nothing fetched from outside the node:

- ``GET /ui`` → 307 to ``/ui/``;
- ``GET /ui/`` → ``index.html`` (tabs Nodes, Seats, Turns, Work, and a trace view);
- ``GET /ui/static/{name}`` → one of :data:`ASSETS` (``app.js``, ``app.css``, ``favicon.svg``); any
  other name answers 404 ``not_found``.

These routes carry no data, so they are served without a token. Every datum the page shows comes from
the token-guarded JSON routes the API already serves, called by the page's script with
``Authorization: Bearer <token>``: ``GET /fleet?inbox=true`` (Nodes, Seats), ``GET /turns`` (Turns),
``GET /events/trace/{trace_id}`` (the trace view), ``GET /work`` (Work). The token is asked once (a
form), kept in the browser's ``sessionStorage``, and asked again on a 401. The page refreshes every
2 s. Every value is written with ``textContent`` (never ``innerHTML``), and the page is served with a
``Content-Security-Policy`` that admits only this node's own scripts, styles and API (``'self'``).

Turns link to their trace on this node (``#trace/<trace_id>``) and, when the operator sets a Grafana
base URL in the page's settings (kept in ``localStorage``; e.g. ``http://localhost:3000`` for the
compose Grafana), to Grafana Explore on the provisioned Tempo data source (uid ``tempo``).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from starlette.responses import FileResponse, RedirectResponse, Response

from shared.runtime import NodeContext, api_error

__all__ = ["ASSETS", "STATIC", "router"]

STATIC = Path(__file__).resolve().parent / "static"
"""The directory holding ``index.html`` and the assets."""

ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
"""Asset name → media type: the only files ``/ui/static/`` serves."""

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""The page's Content-Security-Policy: nothing from outside the node, no inline script."""

_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def router(ctx: NodeContext) -> APIRouter:
    """Build the UI routes (no token: the page and assets hold no data).

    Args:
        ctx: The node context (unused beyond the signature every ingress router shares).

    Returns:
        The router serving ``/ui``, ``/ui/`` and ``/ui/static/{name}``.
    """
    r = APIRouter(tags=["ui"], include_in_schema=False)

    @r.get("/ui")
    async def to_page() -> Response:
        """``/ui`` → 307 to ``/ui/`` (the page's relative asset paths need the slash)."""
        return RedirectResponse("/ui/", status_code=307)

    @r.get("/ui/")
    async def page() -> Response:
        """The operator page (no token: it holds no data; DESIGN.md "Operator UI")."""
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8", headers=_HEADERS)

    @r.get("/ui/static/{name}")
    async def asset(name: str) -> Response:
        """One static asset from the fixed list; any other name answers 404 naming it."""
        media = ASSETS.get(name)
        if media is None:
            raise api_error(404, "not_found", {"what": "ui asset", "key": name})
        return FileResponse(STATIC / name, media_type=media, headers=_HEADERS)

    return r
