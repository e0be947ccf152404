"""``GET /schedules``: every schedule of the org with its next and last fire (CO-33).

``GET /schedules`` (grant ``state:read``) answers 200::

    {"asked": node id, "now": UTC RFC 3339, "enabled": scheduling.enabled,
     "tick_seconds": float, "fires": "ok" | "unavailable",
     "schedules": [{"scope": "role:<handle>" | "unit:<unit id>", "scope_type", "scope_id", "name",
                    "cron", "timezone", "targets": [handle, ...], "enabled", "catchup",
                    "timeout_seconds", "target": "each" | "lead" | null (role schedules),
                    "next_fire": {"at": UTC RFC 3339, "label": local "YYYYmmddTHHMM"} | null,
                    "last_slot": {"at", "label", "seats": {handle: "fired" | "skipped" | null}}
                                 | null}]}

``next_fire``/``last_slot`` are null for a cron line that never matches again / never matched
(``0 0 30 2 *`` is valid syntax).

Schedules come from the node's applied org (roles first, then units depth-first), so every node
answers the same list. ``next_fire`` is the first slot after now in the schedule's zone (a repeated
autumn wall time counts once; a spring slot inside the skipped hour fires at the transition).
``last_slot`` is the most recent slot at or before now and, per target seat, what the ``fires``
claim says: ``fired``, ``skipped`` (``skipped_catchup``) or ``null`` (no claim: not evaluated yet,
missed while nobody held the duty, or older than the bucket's 7 days). When the coordination store
cannot be read the claims are ``null`` and ``fires`` says ``unavailable``; the list itself never
needs the store. 503 ``not_configured`` before the node has a company.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Depends

from shared.coordination import CoordinationUnavailable
from shared.runtime import NodeContext, api_error, require_grant
from shared.schedules import claim_key, fire_label, next_slot, prev_slot, schedules_of

from ._common import add

__all__ = ["router", "schedules_view"]


async def schedules_view(ctx: NodeContext, *, now: datetime | None = None) -> dict[str, Any]:
    """Return the ``GET /schedules`` body for ``ctx``'s org at ``now`` (aware; default the clock).

    Raises:
        HTTPException: 503 ``not_configured`` when the node has no org yet.
    """
    org = ctx.org
    if org is None:
        raise api_error(
            503, "not_configured", "this node has no company applied yet", headers={"Retry-After": "5"}
        )
    now = (now or datetime.now(UTC)).astimezone(UTC)
    coord = ctx.coord
    readable = coord is not None
    out: list[dict[str, Any]] = []
    for ref in schedules_of(org):
        sched = ref.schedule
        zone = ZoneInfo(ref.zone)
        nxt = next_slot(sched.cron, zone, now)
        last = prev_slot(sched.cron, zone, now)
        label = fire_label(last, zone) if last is not None else ""
        seats: dict[str, str | None] = {}
        for target in ref.targets if last is not None else ():
            state: str | None = None
            if readable and coord is not None:
                try:
                    entry = await coord.get(
                        "fires", claim_key(ref.scope_type, ref.scope_id, ref.name, label, target)
                    )
                except CoordinationUnavailable:
                    readable = False
                    entry = None
                if entry is not None:
                    try:
                        state = str(json.loads(entry.value).get("state", "fired"))
                    except (ValueError, AttributeError):
                        state = "fired"  # a claim written before claims carried a state
            seats[target] = state
        out.append(
            {
                "scope": f"{ref.scope_type}:{ref.scope_id}",
                "scope_type": ref.scope_type,
                "scope_id": ref.scope_id,
                "name": ref.name,
                "cron": sched.cron,
                "timezone": ref.zone,
                "targets": list(ref.targets),
                "target": getattr(sched, "target", None),
                "enabled": sched.enabled,
                "catchup": sched.catchup,
                "timeout_seconds": sched.timeout_seconds,
                "next_fire": {"at": nxt.isoformat(), "label": fire_label(nxt, zone)} if nxt else None,
                "last_slot": {"at": last.isoformat(), "label": label, "seats": seats} if last else None,
            }
        )
    settings = org.company.scheduling
    return {
        "asked": ctx.node_id,
        "now": now.isoformat(),
        "enabled": settings.enabled,
        "tick_seconds": settings.tick_seconds,
        "fires": "ok" if readable else "unavailable",
        "schedules": out,
    }


class ScheduleRoutes:
    """The schedules view's endpoint."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    async def get_schedules(self) -> dict[str, Any]:
        return await schedules_view(self.ctx)


def router(ctx: NodeContext) -> APIRouter:
    """Build the schedules route (CO-33)."""
    r = APIRouter(tags=["schedules"])
    h = ScheduleRoutes(ctx)
    add(
        r,
        "/schedules",
        h.get_schedules,
        methods=["GET"],
        dependencies=[Depends(require_grant(ctx.cfg, "state:read"))],
    )
    return r
