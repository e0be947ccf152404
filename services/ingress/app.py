"""The ``ingress`` role: the HTTP API — webhooks, REST, the fleet view (FL-15)."""

from __future__ import annotations

from fastapi import APIRouter

from shared.runtime import NodeContext, RoleService

from .api.routes import events, files, fleet, knowledge, work

__all__ = ["service"]


def service(ctx: NodeContext) -> RoleService:
    """Build the ingress role for ``ctx``: its router and lifespan work."""
    api = APIRouter()
    api.include_router(fleet.router(ctx))
    api.include_router(work.router(ctx))
    api.include_router(knowledge.router(ctx))
    api.include_router(files.router(ctx))
    api.include_router(events.router(ctx))
    return RoleService(name="ingress", router=api)
