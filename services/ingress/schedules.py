"""The schedules view (CO-33): every schedule of the org with its next and last fire.

Used by ``GET /schedules`` (``services/ingress/api/routes/schedules.py``; its docstring says the
answer's shape): :func:`schedules_view`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from shared.coordination import CoordinationUnavailable
from shared.runtime import NodeContext, api_error
from shared.schedules import claim_key, fire_label, next_slot, prev_slot, schedules_of

__all__ = ["schedules_view"]


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
