"""``GET /fleet``: the fleet as the lease bucket says (FL-117, FL-152).

Live nodes (roles, labels, broker kind, protocol, posture, applied epoch, and from ``crewlet_status``
their config epoch, status, error and report instant, FL-117; ``renewed_at``, the ISO-8601 instant
of the node's last presence heartbeat), seat → node with epoch,
duty holders, unmanned roles, unowned seats, and unplaceable seats (seats whose placement no live
seats node matches, FL-61). Read from the lease and duty buckets, never by asking peers, so every
ingress node answers the same ownership. An unreadable store answers 503 — never an empty fleet.

``GET /fleet?inbox=true`` adds ``inboxes``: seat handle → ``{"pending", "ack_pending", "redelivered"}``
(message counts of the seat's inbox as the broker reports them) or ``null`` when the broker did not
answer within 2 s, for every seat of the company (owned or not). The operator UI's Seats tab reads it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from shared.runtime import NodeContext, require_grant

from ...fleet import fleet_view, inbox_depths, unplaceable
from ._common import add

__all__ = ["inbox_depths", "router", "unplaceable"]


class FleetRoutes:
    """The fleet view's endpoint."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    async def get_fleet(self, inbox: bool = False) -> dict[str, Any]:
        return await fleet_view(self.ctx, inbox=inbox)


def router(ctx: NodeContext) -> APIRouter:
    """Build the fleet routes."""
    r = APIRouter(tags=["fleet"])
    h = FleetRoutes(ctx)
    add(
        r,
        "/fleet",
        h.get_fleet,
        methods=["GET"],
        dependencies=[Depends(require_grant(ctx.cfg, "state:read"))],
    )
    return r
