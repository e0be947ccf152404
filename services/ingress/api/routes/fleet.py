"""``GET /fleet``: the fleet as the lease bucket says (FL-152)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from shared import leases
from shared.coordination import CoordinationUnavailable
from shared.runtime import NodeContext, api_error, require_grant

__all__ = ["router"]


def router(ctx: NodeContext) -> APIRouter:
    """Build the fleet routes."""
    r = APIRouter(tags=["fleet"])

    @r.get("/fleet", dependencies=[Depends(require_grant(ctx.cfg, "state:read"))])
    async def get_fleet() -> dict[str, Any]:
        if ctx.coord is None:
            raise api_error(503, "lease store unavailable", "the node has not connected to its broker yet")
        seats = [s.handle for s in ctx.org.seats] if ctx.org is not None else None
        try:
            view = await leases.fleet_view(ctx.coord, seats=seats)
        except CoordinationUnavailable as e:
            raise api_error(503, "lease store unavailable", str(e)) from None
        view["asked"] = ctx.node_id
        return view

    return r
