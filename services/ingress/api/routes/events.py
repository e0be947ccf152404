"""``GET /events``, ``/events/{id}``, ``/events/trace/{trace_id}``: this data node's event log (ES-77).

``GET /events`` pages newest first (CO-27 ``audit:read``); a trace answers at most 500 events, oldest first.

Keyset paging: pass the previous answer's ``next`` as ``before``. ``limit`` is 1..400 (default 100).
Filters: ``event_type``, ``source``, ``category``, ``agent_id``, ``agent_role``, ``task_id``,
``channel_id``, ``sender``, ``trace_id``. Ingress always runs beside ``data`` (FL-17), so the log is
this node's own.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query

from shared import estate
from shared.runtime import NodeContext, api_error, require_grant

from .work import estate_http_error

__all__ = ["router"]


def router(ctx: NodeContext) -> APIRouter:
    """Build the event log route."""
    r = APIRouter(tags=["events"])

    @r.get("/events", dependencies=[Depends(require_grant(ctx.cfg, "audit:read"))])
    async def list_events(
        limit: int = Query(100, ge=1, le=estate.EVENT_LIMIT),
        before: str | None = None,
        event_type: str | None = None,
        source: str | None = None,
        category: str | None = None,
        agent_id: str | None = None,
        agent_role: str | None = None,
        task_id: str | None = None,
        channel_id: str | None = None,
        sender: str | None = None,
        trace_id: str | None = None,
    ) -> dict[str, Any]:
        log = ctx.extras.get("events")
        if not isinstance(log, estate.EventLog):
            raise api_error(
                503, "events_unavailable", "this node keeps no event log (no data role, or booting)"
            )
        filters = {
            k: v
            for k, v in {
                "event_type": event_type,
                "source": source,
                "category": category,
                "agent_id": agent_id,
                "agent_role": agent_role,
                "task_id": task_id,
                "channel_id": channel_id,
                "sender": sender,
                "trace_id": trace_id,
            }.items()
            if v is not None
        }
        try:
            page = await log.query(limit=limit, before=before, filters=filters)
        except estate.EstateError as e:
            raise estate_http_error(e) from None
        return {**page, "node": ctx.node_id}

    def log_of() -> estate.EventLog:
        log = ctx.extras.get("events")
        if not isinstance(log, estate.EventLog):
            raise api_error(
                503, "events_unavailable", "this node keeps no event log (no data role, or booting)"
            )
        return log

    @r.get("/events/trace/{trace_id}", dependencies=[Depends(require_grant(ctx.cfg, "audit:read"))])
    async def trace(trace_id: str) -> dict[str, Any]:
        page = await log_of().query(
            limit=estate.TRACE_LIMIT, max_limit=estate.TRACE_LIMIT, filters={"trace_id": trace_id}
        )
        return {"trace_id": trace_id, "events": list(reversed(page["events"])), "node": ctx.node_id}

    @r.get("/events/{event_id}", dependencies=[Depends(require_grant(ctx.cfg, "audit:read"))])
    async def one(event_id: str) -> dict[str, Any]:
        ev = await log_of().get(event_id)
        if ev is None:
            raise api_error(404, "not_found", {"what": "event", "key": event_id})
        return ev

    return r
