"""JSON error bodies ``{"error": code, "detail": ...}`` for every refusal (CO-27).

Raise :func:`api_error` in a route; :func:`install_error_handlers` renders it, renders an unknown
path as 404 and a wrong method as 405, renders a request that fails validation as ``400
{"error": "invalid_request", "detail": [{path, type, message}]}`` naming each field, caps request
bodies (:data:`MAX_BODY_BYTES`, except the routes that stream their own), and answers anything
unexpected with ``500 {"error": "internal"}`` — the traceback goes to the node's log, never to
the client.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from shared import logs

__all__ = ["ALWAYS_GUARDED", "MAX_BODY_BYTES", "api_error", "install_error_handlers"]

ALWAYS_GUARDED = ("/config", "/secrets", "/fleet", "/retention", "/backup", "/budgets")
"""Path prefixes whose unknown paths answer 401 without a valid token even for a read (FL-16): they
hold the fleet's configuration, secrets and membership, so an anonymous caller learns nothing,
not even which of their paths exist."""
_WRITES = ("POST", "PUT", "PATCH", "DELETE")

MAX_BODY_BYTES = 8 * 1024 * 1024
"""The largest JSON request body read, in bytes; file uploads (``PUT /projects/.../files/...``)
and webhooks enforce their own limits."""

_log = logs.get("api")
_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
}


def api_error(
    status: int, code: str, detail: Any = "", *, headers: dict[str, str] | None = None
) -> HTTPException:
    """Return an exception that answers ``status`` with ``{"error": code, "detail": detail}``."""
    return HTTPException(status, {"error": code, "detail": detail}, headers=headers)


class _BodyCap:
    """Refuse a JSON body over :data:`MAX_BODY_BYTES` by its declared length (413), before reading it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") in ("POST", "PUT", "PATCH"):
            path = str(scope.get("path", ""))
            own_limit = path.startswith("/webhooks/") or ("/files/" in path and path.startswith("/projects/"))
            if not own_limit:
                length = dict(scope.get("headers") or []).get(b"content-length", b"")
                if length.isdigit() and int(length) > MAX_BODY_BYTES:
                    resp = JSONResponse(
                        {"error": "too_large", "detail": f"the body is over {MAX_BODY_BYTES} bytes"},
                        status_code=413,
                    )
                    await resp(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _anonymous(request: Request, tokens: tuple[str, ...]) -> bool:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return True
    presented = value.strip().encode()
    return not any(hmac.compare_digest(t.encode(), presented) for t in tokens)


def install_error_handlers(app: FastAPI, *, tokens: tuple[str, ...] | None = None) -> None:
    """Install the JSON error renderers and the body cap on ``app``.

    Args:
        app: The node's app.
        tokens: The node's API tokens (``api.auth.tokens``). Given, a path no route serves answers
            like an unknown path on an ingress node (FL-16): 401 ``unauthorized`` for a write
            (POST/PUT/PATCH/DELETE; webhooks excepted) or an :data:`ALWAYS_GUARDED` prefix
            without a valid bearer token, else 404. So a node without ``ingress`` answers
            ``POST /config`` 401 and ``GET /agents`` 404, as an ingress node's guard would.
    """

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        body: dict[str, Any]
        if isinstance(exc.detail, dict) and "error" in exc.detail:
            body = exc.detail
        else:
            body = {"error": _STATUS_CODES.get(exc.status_code, "error"), "detail": exc.detail}
        if exc.status_code == 400 and isinstance(exc.detail, str):  # the body could not be parsed
            body = {
                "error": "invalid_request",
                "detail": [{"path": "body", "type": "json_invalid", "message": exc.detail}],
            }
        if exc.status_code == 404 and body.get("detail") == "Not Found":
            path = request.url.path
            guarded = request.method in _WRITES and not path.startswith("/webhooks/")
            guarded = guarded or any(path == p or path.startswith(p + "/") for p in ALWAYS_GUARDED)
            if tokens is not None and guarded and _anonymous(request, tokens):
                return JSONResponse(
                    {"error": "unauthorized", "detail": "Authorization: Bearer <token> required"},
                    status_code=401,
                )
            body["detail"] = f"no route {request.method} {path}"
        return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        detail = []
        for e in exc.errors():
            loc = [str(p) for p in e.get("loc", ()) if p != "body"]
            kind = str(e.get("type", "invalid"))
            path = "body" if kind == "json_invalid" else (".".join(loc) or "body")
            detail.append({"path": path, "type": kind, "message": str(e.get("msg", "invalid"))})
        return JSONResponse({"error": "invalid_request", "detail": detail}, status_code=400)

    async def undecodable(request: Request, exc: Exception) -> JSONResponse:
        kind = "too deeply nested" if isinstance(exc, RecursionError) else "not UTF-8 JSON"
        return JSONResponse(
            {
                "error": "invalid_request",
                "detail": [{"path": "body", "type": "json_invalid", "message": f"the body is {kind}"}],
            },
            status_code=400,
        )

    async def internal(request: Request, exc: Exception) -> JSONResponse:
        _log.error(
            "api_internal_error",
            method=request.method,
            path=request.url.path,
            error=f"{type(exc).__name__}: {exc}",
            exc_info=exc,
        )
        return JSONResponse(
            {"error": "internal", "detail": "the node failed to answer; see its log"}, status_code=500
        )

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(UnicodeDecodeError, undecodable)
    app.add_exception_handler(RecursionError, undecodable)
    app.add_exception_handler(Exception, internal)
    app.add_middleware(_BodyCap)
