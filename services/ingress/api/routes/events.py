"""``GET /events``, ``/events/{id}``, ``/events/trace/{trace_id}``: the fleet's event logs (ES-77, ES-79).

Each data node keeps the events it published (ES-77). These routes, on any ingress node, ask every
live data node at once (``crewlet.history.scatter.<node_id>``; this node in-process when it keeps a
log) and wait at most the read budget (5 s); events merge by ``(event_time, event_id)``. Every answer
carries ``coverage`` (``answered``, ``missing`` with ``reasons``, ``other_version``, ``partial``); a
missing node raises the ``history_partial`` alarm. 503 ``events_unavailable`` when no live node keeps
an event log.

``GET /events`` pages newest first (CO-27 ``audit:read``); a trace answers at most 500 events, oldest first.

Keyset paging: pass the previous answer's ``next`` as ``before`` (the cursor is a fleet-wide
``<event_time>:<event_id>``, so every node pages from the same place). ``limit`` is 1..400 (default
100). Filters: ``event_type``, ``source``, ``category``, ``agent_id``, ``agent_role``, ``task_id``,
``channel_id``, ``sender``, ``trace_id``. ``GET /events/{id}`` answers 404 only when every live data
node answered and none has it; 503 ``history_partial`` with the coverage while one that might is missing.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query

from shared import estate, history
from shared.runtime import NodeContext, api_error, require_grant

from ...scatter import Scattered, scatter
from ._common import add, estate_http_error

__all__ = ["router"]

_FILTERS = (
    "event_type",
    "source",
    "category",
    "agent_id",
    "agent_role",
    "task_id",
    "channel_id",
    "sender",
    "trace_id",
)


def _unavailable() -> Exception:
    return api_error(503, "events_unavailable", "no live node keeps an event log (no data node, or booting)")


def _partial(event_id: str, got: Scattered) -> Exception:
    return api_error(
        503,
        "history_partial",
        {
            "message": f"no event {event_id!r} on the nodes that answered; "
            f"{', '.join(sorted(got.coverage.missing + got.coverage.other_version))} may hold it",
            "coverage": got.coverage_dict(),
        },
        headers={"Retry-After": "5"},
    )


class EventRoutes:
    """The event log endpoints: scatter reads of every live data node's log (ES-79)."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    async def ask(self, what: str, args: dict[str, Any]) -> Scattered:
        """Scatter ``what`` to the live nodes; 503 ``events_unavailable`` when none keeps a log."""
        got = await scatter(self.ctx, what, args)
        if not got.holders:
            raise _unavailable()
        return got

    async def list_events(
        self,
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
        given = locals()
        filters = {k: given[k] for k in _FILTERS if given[k] is not None}
        if before:
            t, sep, _ = before.partition(":")
            if not sep or not t.isdigit():
                raise estate_http_error(estate.InvalidField("before", "is not a cursor from a previous page"))
        got = await self.ask("events", {"limit": limit, "before": before, "filters": filters})
        rows, more = history.merge_rows("events", got.answers, limit=limit)
        last = rows[-1] if rows else None
        return {
            "events": rows,
            "next": f"{last['event_time']}:{last['event_id']}" if more and last else None,
            "node": self.ctx.node_id,
            "coverage": got.coverage_dict(),
        }

    async def trace(self, trace_id: str) -> dict[str, Any]:
        got = await self.ask("trace", {"trace_id": trace_id})
        rows, _ = history.merge_rows("trace", got.answers, limit=estate.TRACE_LIMIT)
        return {
            "trace_id": trace_id,
            "events": list(reversed(rows)),
            "node": self.ctx.node_id,
            "coverage": got.coverage_dict(),
        }

    async def one(self, event_id: str) -> dict[str, Any]:
        got = await self.ask("event", {"event_id": event_id})
        found = [
            row
            for node in sorted(got.answers)
            for row in got.answers[node].get("rows") or []
            if isinstance(row, dict)
        ]
        if found:  # the newest row with that id, as one log's read answers
            newest = max(found, key=lambda row: history.row_key("event", row))
            return {**newest, "coverage": got.coverage_dict()}
        if got.coverage.missing or got.coverage.other_version:
            raise _partial(event_id, got)
        raise api_error(404, "not_found", {"what": "event", "key": event_id})


def router(ctx: NodeContext) -> APIRouter:
    """Build the event log route."""
    r = APIRouter(tags=["events"])
    audit = [Depends(require_grant(ctx.cfg, "audit:read"))]
    h = EventRoutes(ctx)
    add(r, "/events", h.list_events, methods=["GET"], dependencies=audit)
    add(r, "/events/trace/{trace_id}", h.trace, methods=["GET"], dependencies=audit)
    add(r, "/events/{event_id}", h.one, methods=["GET"], dependencies=audit)
    return r
