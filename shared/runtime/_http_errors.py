"""JSON error bodies ``{"error": code, "detail": ...}`` for every refusal (CO-27).

Raise :func:`api_error` in a route; :func:`install_error_handlers` renders it, and renders a
request that fails validation as ``400 {"error": "invalid_request", "detail": [{path, type,
message}]}`` naming each field, never a traceback.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

__all__ = ["api_error", "install_error_handlers"]


def api_error(
    status: int, code: str, detail: Any = "", *, headers: dict[str, str] | None = None
) -> HTTPException:
    """Return an exception that answers ``status`` with ``{"error": code, "detail": detail}``."""
    return HTTPException(status, {"error": code, "detail": detail}, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Install the JSON error renderers on ``app``."""

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        body = (
            exc.detail
            if isinstance(exc.detail, dict) and "error" in exc.detail
            else {
                "error": {
                    401: "unauthorized",
                    403: "forbidden",
                    404: "not_found",
                    405: "method_not_allowed",
                }.get(exc.status_code, "error"),
                "detail": exc.detail,
            }
        )
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        detail = [
            {
                "path": ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body",
                "type": str(e.get("type", "invalid")),
                "message": str(e.get("msg", "invalid")),
            }
            for e in exc.errors()
        ]
        return JSONResponse({"error": "invalid_request", "detail": detail}, status_code=400)

    from starlette.exceptions import HTTPException as StarletteHTTPException

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)
