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

import asyncio
from typing import Any

from fastapi import APIRouter, Depends

from shared import control, leases
from shared.bus import Bus
from shared.coordination import CoordinationUnavailable
from shared.runtime import NodeContext, api_error, require_grant

from ._common import add

__all__ = ["inbox_depths", "router", "unplaceable"]

INBOX_BUDGET = 2.0
"""Seconds ``?inbox=true`` waits for the broker's mailbox counters before answering ``null``."""


async def inbox_depths(bus: Any, seats: list[str]) -> dict[str, dict[str, int] | None]:
    """Each seat's inbox counters, asked of the broker at once (the UI's Seats tab, CO-7).

    Args:
        bus: The node's :class:`~shared.bus.Bus` (``ctx.extras["bus"]``), or anything else when the
            node has not opened it yet (every seat then answers ``None``).
        seats: Seat handles.

    Returns:
        Seat → ``{"pending": int, "ack_pending": int, "redelivered": int}`` (messages), or ``None``
        for a seat the broker did not answer for within :data:`INBOX_BUDGET` seconds.
    """
    if not isinstance(bus, Bus) or not seats:
        return {s: None for s in seats}

    async def one(handle: str) -> dict[str, int] | None:
        try:
            st = await asyncio.wait_for(bus.state(handle), INBOX_BUDGET)
        except Exception:  # noqa: BLE001 - an unanswered seat reads null, never fails the view
            return None
        return {"pending": st.pending, "ack_pending": st.ack_pending, "redelivered": st.redelivered}

    got = await asyncio.gather(*(one(s) for s in seats))
    return dict(zip(seats, got, strict=True))


def unplaceable(view: dict[str, Any], org: Any) -> list[dict[str, str]]:
    """Seats of ``org`` whose placement no live seats node in ``view`` matches (FL-61)."""
    seat_nodes = [n for n in view["nodes"] if "seats" in n["roles"]]
    out = []
    for seat in org.seats:
        p = seat.role.placement
        if p is None:
            if not seat_nodes:
                out.append({"seat": seat.handle, "selector": "anywhere"})
            continue
        sel = leases.Selector(p.node, tuple(sorted(p.labels.items())))
        if not any(sel.matches(n["id"], n["labels"]) for n in seat_nodes):
            out.append({"seat": seat.handle, "selector": sel.describe()})
    return out


class FleetRoutes:
    """The fleet view's endpoint."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    async def get_fleet(self, inbox: bool = False) -> dict[str, Any]:
        if self.ctx.coord is None:
            raise api_error(503, "lease store unavailable", "the node has not connected to its broker yet")
        seats = [s.handle for s in self.ctx.org.seats] if self.ctx.org is not None else None
        try:
            view = await leases.fleet_view(self.ctx.coord, seats=seats)
        except CoordinationUnavailable as e:
            raise api_error(503, "lease store unavailable", str(e)) from None
        view["unplaceable_seats"] = unplaceable(view, self.ctx.org) if self.ctx.org is not None else []
        view["asked"] = self.ctx.node_id
        try:  # FL-117: each node's config epoch, status and error; an aged-out status reads absent
            statuses = await control.read_statuses(self.ctx.coord)
        except CoordinationUnavailable:
            statuses = {}
        for node in view["nodes"]:
            st = statuses.get(node["id"])
            node["config_epoch"] = st.applied_epoch if st is not None else None
            node["config_status"] = st.status if st is not None else None
            node["config_error"] = (st.error or None) if st is not None else None
            node["config_reported_at"] = st.reported_at if st is not None else None
            if st is not None:
                node["posture"] = st.posture
        rec = self.ctx.extras.get("control")
        view["config_epoch"] = getattr(rec, "target", None)
        if inbox:
            handles = sorted(set(seats or []) | {s["seat"] for s in view["seats"]})
            view["inboxes"] = await inbox_depths(self.ctx.extras.get("bus"), handles)
        return view


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
