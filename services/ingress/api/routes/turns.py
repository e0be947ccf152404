"""``GET /turns``, ``GET /turns/{id}``, ``GET /tokens/breakdown`` across the fleet (CO-20, CO-22, ES-79).

Each node keeps the turns it ran (DESIGN.md "Stores": ``node.db``). These routes, on any ingress
node, ask every live node at once (``crewlet.history.scatter.<node_id>``; this node in-process) and
wait at most the read budget (5 s); rows merge newest first by ``(started_at, turn_id)`` (or most
tokens first with ``sort=-tokens``) within ``limit``, token rollups are summed. Every answer carries
``coverage``: ``answered``, ``missing`` (live nodes that did not answer in time; ``reasons`` says
why), ``other_version`` (nodes on another history-protocol version, listed without rows) and
``partial``; a missing node raises the ``history_partial`` alarm. ``GET /turns/{id}`` answers 404
only when every live node answered and none has the turn; while a node that might have it is
missing it answers 503 ``history_partial`` with the coverage. A node drained for good takes its turns
with it (ES-80): they are read from the OTLP sink (FL-6).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query

from shared import history
from shared.runtime import NodeContext, api_error, require_grant

from ...scatter import Scattered, scatter
from ._common import add

__all__ = ["router"]


def _partial(turn_id: str, got: Scattered) -> Exception:
    return api_error(
        503,
        "history_partial",
        {
            "message": f"turn_id: no turn {turn_id!r} on the nodes that answered; "
            f"{', '.join(sorted(got.coverage.missing + got.coverage.other_version))} "
            "did not answer (or speak another history version) and may hold it",
            "coverage": got.coverage_dict(),
        },
        headers={"Retry-After": "5"},
    )


class TurnRoutes:
    """The turn-record endpoints: scatter reads of every live node's turns (ES-79)."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    async def list_turns(
        self,
        seat: str | None = None,
        work_item: str | None = None,
        work_key: str | None = None,
        outcome: str | None = None,
        limit: int = Query(50, ge=1, le=500),
        sort: Literal["-started", "-tokens"] = "-started",
    ) -> dict[str, Any]:
        filters = {"seat": seat, "work_item": work_item, "work_key": work_key, "outcome": outcome}
        got = await scatter(
            self.ctx,
            "turns",
            {"filters": {k: v for k, v in filters.items() if v}, "limit": limit, "sort": sort},
        )
        rows, _ = history.merge_rows("turns", got.answers, limit=limit, sort=sort)
        return {"node": self.ctx.node_id, "turns": rows, "count": len(rows), "coverage": got.coverage_dict()}

    async def get_turn(self, turn_id: str) -> dict[str, Any]:
        got = await scatter(self.ctx, "turn", {"turn_id": turn_id})
        for node in sorted(got.answers):
            rows = got.answers[node].get("rows") or []
            if rows and isinstance(rows[0], dict):
                return {**rows[0], "coverage": got.coverage_dict()}
        if got.coverage.missing or got.coverage.other_version:
            raise _partial(turn_id, got)
        raise api_error(
            404,
            "unknown_turn",
            f"turn_id: no turn {turn_id!r} recorded on any live node ({', '.join(sorted(got.coverage.answered))})",
        )

    async def tokens(self, days: int = Query(30, ge=1, le=366)) -> dict[str, Any]:
        got = await scatter(self.ctx, "tokens", {"days": days})
        return {
            "node": self.ctx.node_id,
            **history.merge_tokens(got.answers),
            "coverage": got.coverage_dict(),
        }


def router(ctx: NodeContext) -> APIRouter:
    """Build the turn-record routes."""
    r = APIRouter(tags=["turns"])
    h = TurnRoutes(ctx)
    audit = [Depends(require_grant(ctx.cfg, "audit:read"))]
    add(r, "/turns", h.list_turns, methods=["GET"], dependencies=audit)
    add(r, "/turns/{turn_id}", h.get_turn, methods=["GET"], dependencies=audit)
    add(
        r,
        "/tokens/breakdown",
        h.tokens,
        methods=["GET"],
        dependencies=[Depends(require_grant(ctx.cfg, "state:read"))],
    )
    return r
