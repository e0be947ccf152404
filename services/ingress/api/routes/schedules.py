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

from typing import Any

from fastapi import APIRouter, Depends

from shared.runtime import NodeContext, require_grant

from ...schedules import schedules_view
from ._common import add

__all__ = ["router", "schedules_view"]


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
