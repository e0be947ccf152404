"""``GET /turns``, ``GET /turns/{id}``, ``GET /tokens/breakdown`` from this node's records (CO-20, CO-22).

Turn history is node-local (DESIGN.md "Stores"): a node answers for the turns it ran. In a fleet
the turns of other nodes are read from their own ingress, or from the OTLP sink (FL-6).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query

from shared.records import TurnStore
from shared.runtime import NodeContext, api_error, require_grant

__all__ = ["router"]


def router(ctx: NodeContext) -> APIRouter:
    """Build the turn-record routes."""
    r = APIRouter(tags=["turns"])

    def store() -> TurnStore:
        s = ctx.extras.get("turns")
        if not isinstance(s, TurnStore):
            raise api_error(
                503, "not_ready", "the node's records are not open yet", headers={"Retry-After": "5"}
            )
        return s

    @r.get("/turns", dependencies=[Depends(require_grant(ctx.cfg, "audit:read"))])
    async def list_turns(
        seat: str | None = None,
        work_item: str | None = None,
        work_key: str | None = None,
        outcome: str | None = None,
        limit: int = Query(50, ge=1, le=500),
        sort: Literal["-started", "-tokens"] = "-started",
    ) -> dict[str, Any]:
        rows = await store().list(
            filters={"seat": seat, "work_item": work_item, "work_key": work_key, "outcome": outcome},
            limit=limit,
            sort=sort,
        )
        return {"node": ctx.node_id, "turns": rows, "count": len(rows)}

    @r.get("/turns/{turn_id}", dependencies=[Depends(require_grant(ctx.cfg, "audit:read"))])
    async def get_turn(turn_id: str) -> dict[str, Any]:
        row = await store().get(turn_id)
        if row is None:
            raise api_error(
                404, "unknown_turn", f"turn_id: no turn {turn_id!r} recorded on node {ctx.node_id}"
            )
        return row

    @r.get("/tokens/breakdown", dependencies=[Depends(require_grant(ctx.cfg, "state:read"))])
    async def tokens(days: int = Query(30, ge=1, le=366)) -> dict[str, Any]:
        return await store().token_breakdown(days=days)

    return r
