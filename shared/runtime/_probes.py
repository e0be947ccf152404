"""``GET /health`` and ``GET /ready`` on every node, never auth-guarded (FL-126..FL-128)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ._context import NodeContext

__all__ = ["probes_router"]


def probes_router(ctx: NodeContext) -> APIRouter:
    """Build the probe routes over ``ctx`` (a trailing slash is accepted too)."""
    router = APIRouter(tags=["probes"])

    async def health(request: Request) -> dict[str, Any]:
        return ctx.health()

    async def ready(request: Request) -> JSONResponse:
        ok, reason, detail = ctx.ready()
        body: dict[str, Any] = {
            "ready": ok,
            "node": ctx.node_id,
            "configured": ctx.company is not None,
            "draining": ctx.draining,
            "posture": ctx.posture,
        }
        if not ok:
            body["reason"] = reason
            body["detail"] = detail
        return JSONResponse(body, status_code=200 if ok else 503)

    for path in ("/health", "/health/"):
        router.add_api_route(path, health, methods=["GET"], include_in_schema=path == "/health")
    for path in ("/ready", "/ready/"):
        router.add_api_route(
            path,
            ready,
            methods=["GET"],
            include_in_schema=path == "/ready",
            responses={
                503: {
                    "description": "Not ready: draining, booting or unconfigured (reason, detail)",
                    "content": {"application/json": {"schema": {"type": "object", "required": ["ready"]}}},
                }
            },
        )
    return router
