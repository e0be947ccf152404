"""JSON error bodies ``{"error": code, "detail": ...}`` for every refusal (CO-27).

Raise :func:`api_error` in a route; :func:`install_error_handlers` renders it, renders an unknown
path as 404 and a wrong method as 405, renders a request that fails validation as ``400
{"error": "invalid_request", "detail": [{path, type, message}]}`` naming each field, caps request
bodies (:data:`MAX_BODY_BYTES`, except the routes that stream their own), refuses a JSON body holding
a string that is not text (a lone surrogate, :class:`_TextCheck`) before any route runs, answers a
405 with an ``Allow`` header listing every method the path takes, and answers anything
unexpected with ``500 {"error": "internal"}`` — the traceback goes to the node's log, never to
the client. The app's OpenAPI document says the same (:func:`_document_refusals`): ``400`` with the
refusal's schema where FastAPI would claim ``422``, ``401``/``403`` and ``x-grant`` on guarded
routes, ``default`` for the rest (issue 17).
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from shared import logs
from shared.text import not_text

from ._auth import CHALLENGE, caller_refused, check_caller, grant_of

__all__ = ["ALWAYS_GUARDED", "MAX_BODY_BYTES", "MAX_VERSION", "api_error", "install_error_handlers"]

ALWAYS_GUARDED = ("/config", "/secrets", "/fleet", "/retention", "/backup", "/budgets")
"""Path prefixes whose unknown paths answer 401 without a valid token even for a read (FL-16): they
hold the fleet's configuration, secrets and membership, so an anonymous caller learns nothing,
not even which of their paths exist."""
_WRITES = ("POST", "PUT", "PATCH", "DELETE")

MAX_BODY_BYTES = 8 * 1024 * 1024
"""The largest JSON request body read, in bytes; file uploads (``PUT /projects/.../files/...``)
and webhooks enforce their own limits."""

MAX_VERSION = 2**53 - 1
"""The largest version (``if_match``, ``?version=``, ``If-Match``) a route accepts: a version counts writes
from 1, and 2**53 - 1 is the largest integer every JSON reader keeps exact. A bigger one is a 400 naming
the field, never a 64-bit overflow in SQLite (issue 17)."""

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
    status: int,
    code: str,
    detail: Any = "",
    *,
    headers: dict[str, str] | None = None,
    field: str | None = None,
) -> HTTPException:
    """Return an exception that answers ``status`` with ``{"error": code, "detail": detail}``.

    Args:
        field: The input refused (``scope``, ``X-Summary``, ``name``): added as ``"field"`` so a
            refusal whose ``detail`` is a sentence still names what to fix (issue 17).
    """
    body: dict[str, Any] = {"error": code, "detail": detail}
    if field is not None:
        body["field"] = field
    return HTTPException(status, body, headers=headers)


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


_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}|\xed[\xa0-\xbf]")
"""A JSON escape of a UTF-16 surrogate, or its raw (CESU) bytes, which ``json.loads`` of bytes lets
through (``surrogatepass``): the cheap test before a body is parsed to find a lone one."""


class _TextCheck:
    """Refuse a JSON request body holding a string that is not text (issue 17), before any route runs.

    A lone surrogate (``"\\ud800"``, or its raw bytes) parses into a Python string that no UTF-8 writer
    can encode: let through, it failed a write after its op was logged (500, or an "unknown outcome"
    repeated forever). Every POST/PUT/PATCH body but the webhooks' and file uploads' (they read bytes
    and check their own) is read here once; only a body with a surrogate's escape or bytes is parsed,
    and a lone one answers ``400 {"error": "invalid_request", "detail": [{"path": <field>, "type":
    "string_unicode", "message": ...}]}`` naming the field (dotted: ``labels.0``). The body is then
    handed on unchanged. Path and query strings need no check: the server decodes them with U+FFFD
    for bytes that are not UTF-8.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        if path.startswith("/webhooks/") or ("/files/" in path and path.startswith("/projects/")):
            await self.app(scope, receive, send)
            return
        held: list[Any] = []
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            held.append(message)
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > MAX_BODY_BYTES:  # a body without a declared length, over the cap
                resp = JSONResponse(
                    {"error": "too_large", "detail": f"the body is over {MAX_BODY_BYTES} bytes"},
                    status_code=413,
                )
                await resp(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        bad = None
        if _MAYBE_SURROGATE.search(body):
            try:
                bad = not_text(json.loads(body))
            except (ValueError, RecursionError):
                bad = None  # not JSON: the route's own parser refuses it, naming the body
        if bad is not None:
            resp = JSONResponse(
                {
                    "error": "invalid_request",
                    "detail": [{"path": bad[0], "type": "string_unicode", "message": bad[1]}],
                },
                status_code=400,
            )
            await resp(scope, receive, send)
            return

        async def replay() -> Any:
            return held.pop(0) if held else await receive()

        await self.app(scope, replay, send)


def _allowed(request: Request) -> str:
    """The methods the request's path takes, for a 405's ``Allow`` (RFC 9110 §15.5.6).

    The routes are tried in order, as the router does; the first whose pattern matches the path
    names the resource (``/work/catalogue``, not ``/work/{key}``), and ``Allow`` lists the methods
    of every route with that same pattern (``GET, POST`` on ``/work``), as the OpenAPI document does.
    """
    path = request.url.path
    routes = [
        r for r in iter_route_contexts(request.app.routes) if getattr(r, "path_regex", None) is not None
    ]
    first = next((r for r in routes if r.path_regex.match(path)), None)
    if first is None:
        return ""
    methods: set[str] = set()
    for route in routes:
        if route.path_format == first.path_format:
            methods |= set(route.methods or ())
    return ", ".join(sorted(methods))


_REFUSAL = {
    "type": "object",
    "required": ["error", "detail"],
    "properties": {
        "error": {"type": "string", "description": "A code, e.g. not_found, conflict, draining"},
        "detail": {"description": "What was refused: a sentence, or an object naming the field or key"},
    },
}
_ISSUE = {
    "type": "object",
    "required": ["path", "type", "message"],
    "properties": {
        "path": {"type": "string", "description": "The field: query.limit, body, op_id, labels.0, ..."},
        "type": {"type": "string"},
        "message": {"type": "string"},
    },
}
_FIELD = {
    "type": "object",
    "required": ["field", "message"],
    "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
}
_BAD_REQUEST = {
    "type": "object",
    "required": ["error", "detail"],
    "properties": {
        "error": {
            "type": "string",
            "description": "invalid_request (the declared shape) or invalid (a value)",
        },
        "detail": {
            "description": "A list of {path, type, message}, an object {field, message}, or a sentence"
        },
        "field": {"type": "string", "description": "The input refused, beside a sentence detail"},
    },
    "anyOf": [
        {"required": ["field"]},
        {
            "properties": {
                "detail": {
                    "anyOf": [
                        {
                            "type": "array",
                            "minItems": 1,
                            "items": {"$ref": "#/components/schemas/InvalidField"},
                        },
                        {"$ref": "#/components/schemas/RefusedField"},
                    ]
                }
            }
        },
    ],
}


def _json(ref: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": ref}}}}


def _grants(app: FastAPI) -> dict[tuple[str, str], str]:
    """``(path, method) → grant`` of every route guarded by :func:`~shared.runtime.require_grant`."""
    out: dict[tuple[str, str], str] = {}
    for route in iter_route_contexts(app.routes):
        dependant = getattr(route, "dependant", None)
        todo = list(dependant.dependencies) if dependant is not None else []
        while todo:
            dep = todo.pop()
            grant = grant_of(dep.call)
            if grant is not None:
                for method in route.methods or ():
                    out[(str(route.path_format), method.lower())] = grant
            todo.extend(dep.dependencies)
    return out


def _document_refusals(app: FastAPI, schema: dict[str, Any]) -> None:
    """Make ``schema`` (the app's OpenAPI) say what the API answers (issue 17).

    FastAPI documents ``422 HTTPValidationError`` on every operation with a parameter, while the
    validation refusal is ``400 {"error": "invalid_request", "detail": [{path, type, message}]}``
    (:func:`install_error_handlers`). Here every operation documents instead: ``400`` with that
    shape, ``{"error", "detail": {"field", "message"}}`` for a value a route refuses itself, or
    ``{"error", "detail": <sentence>, "field"}`` (operations with parameters or a body);
    ``401`` and ``403`` with the ``bearer`` scheme and ``x-grant`` on a route that asks a grant
    (CO-27); and ``default``, the ``{"error", "detail"}`` refusal of any other status (404 unknown
    key, 405, 409 conflict, 413 too large, 422 a body the route checks itself, 503 with
    ``Retry-After``). A response a route declares itself is kept.
    """
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    schemas.update(Refusal=_REFUSAL, InvalidField=_ISSUE, RefusedField=_FIELD, BadRequest=_BAD_REQUEST)
    schema["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    grants = _grants(app)
    for path, ops in schema.get("paths", {}).items():
        for method, op in ops.items():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            responses = op["responses"]
            auto = responses.get("422", {}).get("content", {}).get("application/json", {}).get("schema", {})
            if auto.get("$ref", "").endswith("/HTTPValidationError"):
                del responses["422"]
            if op.get("parameters") or "requestBody" in op or method in ("post", "put", "patch"):
                responses.setdefault(
                    "400", _json("#/components/schemas/BadRequest", "Refused input, naming the field")
                )
            grant = grants.get((path, method))
            if grant is not None:
                op["security"] = [{"bearer": []}]
                op["x-grant"] = grant
                responses.setdefault("401", _json("#/components/schemas/Refusal", "No or an unknown token"))
                responses.setdefault(
                    "403", _json("#/components/schemas/Refusal", f"The token lacks the {grant} grant")
                )
            responses.setdefault("default", _json("#/components/schemas/Refusal", "Any other refusal"))


def _anonymous(request: Request, tokens: tuple[str, ...]) -> bool:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return True
    presented = value.strip().encode()
    return not any(hmac.compare_digest(t.encode(), presented) for t in tokens)


_QUERY_NAMES: dict[int, frozenset[str]] = {}


def _query_names(dependant: Any) -> frozenset[str]:
    """Every query parameter name (alias) ``dependant`` and its sub-dependencies declare."""
    names = {str(getattr(f, "alias", None) or f.name) for f in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return frozenset(names)


async def refuse_unknown_query(request: Request) -> None:
    """Refuse a query parameter the route does not declare: 400 ``invalid_request`` naming it (CO-27).

    Every route answers the same way (installed as an app-wide dependency by
    :func:`install_error_handlers`). Before this, ``GET /work?stauts=done`` listed every item as if
    no filter had been asked for (issue 17's tryout): a misspelt filter now reads as one. The
    detail is the validation shape, ``[{"path": "query.<name>", "type": "extra_forbidden",
    "message"}]``, the message listing what the route takes. A guarded route checks the caller
    first: without a valid token the answer is 401 (403 without the grant), never a 400 that lists
    the route's parameters to an anonymous caller (issue 38: ``GET /work?stauts=x``).

    Raises:
        HTTPException: 401/403 from the route's grant check; 400 for an undeclared parameter.
    """
    if not request.query_params:
        return
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    known = _QUERY_NAMES.get(id(route))
    if known is None:
        known = _QUERY_NAMES[id(route)] = _query_names(dependant)
    unknown = sorted({k for k in request.query_params if k not in known})
    if unknown:
        await check_caller(dependant, request)  # who may ask comes first: 401/403, then 400 (issue 38)
        takes = ", ".join(sorted(known)) or "no query parameters"
        where = f"{request.method} {getattr(route, 'path', request.url.path)}"
        raise HTTPException(
            400,
            {
                "error": "invalid_request",
                "detail": [
                    {
                        "path": f"query.{name}",
                        "type": "extra_forbidden",
                        "message": f"{name!r} is not a parameter of {where}; it takes {takes}",
                    }
                    for name in unknown
                ],
                "field": f"query.{unknown[0]}",
            },
        )


def _http_error_renderer(
    tokens: tuple[str, ...] | None,
) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    """The renderer of an HTTP error: its ``{"error", "detail"}`` body; an unknown path 404 (or 401
    for a guarded one without a valid token, FL-16); a 405 with ``Allow``."""

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        body: dict[str, Any]
        if isinstance(exc.detail, dict) and "error" in exc.detail:
            body = exc.detail
        else:
            body = {"error": _STATUS_CODES.get(exc.status_code, "error"), "detail": exc.detail}
        if exc.status_code == 400 and isinstance(exc.detail, str):  # the body could not be parsed
            if (refused := await caller_refused(request)) is not None:
                return refused
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
                    headers=CHALLENGE,
                )
            body["detail"] = f"no route {request.method} {path}"
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:  # the first route matching the path raised it, naming only its methods
            allow = _allowed(request)
            headers = {**(headers or {}), "Allow": allow}
            body["detail"] = f"{request.method} {request.url.path}: allowed {allow}"
        return JSONResponse(body, status_code=exc.status_code, headers=headers)

    return http_error


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    if (refused := await caller_refused(request)) is not None:  # a body read before the guard ran
        return refused
    detail = []
    for e in exc.errors():
        loc = [str(p) for p in e.get("loc", ()) if p != "body"]
        kind = str(e.get("type", "invalid"))
        path = "body" if kind == "json_invalid" else (".".join(loc) or "body")
        detail.append({"path": path, "type": kind, "message": str(e.get("msg", "invalid"))})
    return JSONResponse({"error": "invalid_request", "detail": detail}, status_code=400)


async def _undecodable(request: Request, exc: Exception) -> JSONResponse:
    if (refused := await caller_refused(request)) is not None:
        return refused
    kind = "too deeply nested" if isinstance(exc, RecursionError) else "not UTF-8 JSON"
    return JSONResponse(
        {
            "error": "invalid_request",
            "detail": [{"path": "body", "type": "json_invalid", "message": f"the body is {kind}"}],
        },
        status_code=400,
    )


async def _internal(request: Request, exc: Exception) -> JSONResponse:
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


def install_error_handlers(app: FastAPI, *, tokens: tuple[str, ...] | None = None) -> None:
    """Install the JSON error renderers, the body cap, the text check of JSON bodies, the refusal of
    undeclared query parameters (:func:`refuse_unknown_query`, for routes included after this call)
    and the OpenAPI writer (:func:`_document_refusals`: the document names the refusals really
    sent) on ``app``.

    Args:
        app: The node's app.
        tokens: The node's API tokens (``api.auth.tokens``). Given, a path no route serves answers
            like an unknown path on an ingress node (FL-16): 401 ``unauthorized`` for a write
            (POST/PUT/PATCH/DELETE; webhooks excepted) or an :data:`ALWAYS_GUARDED` prefix
            without a valid bearer token, else 404. So a node without ``ingress`` answers
            ``POST /config`` 401 and ``GET /agents`` 404, as an ingress node's guard would.
    """

    app.router.dependencies.append(Depends(refuse_unknown_query))

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            _document_refusals(app, FastAPI.openapi(app))
        assert app.openapi_schema is not None
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_exception_handler(StarletteHTTPException, _http_error_renderer(tokens))
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(UnicodeDecodeError, _undecodable)
    app.add_exception_handler(RecursionError, _undecodable)
    app.add_exception_handler(Exception, _internal)
    app.add_middleware(_TextCheck)
    app.add_middleware(_BodyCap)  # added last: runs first, so an oversized body is never read
