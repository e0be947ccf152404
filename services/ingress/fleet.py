"""The fleet view (FL-117, FL-152, FL-61): the lease bucket's fleet with each node's config status,
the unplaceable seats and, asked for, each seat's inbox counters.

Used by ``GET /fleet`` (``services/ingress/api/routes/fleet.py``; its docstring says the answer):
:func:`fleet_view`; :func:`inbox_depths` and :func:`unplaceable` are its parts.
"""

from __future__ import annotations

import asyncio
from typing import Any

from shared import control, leases
from shared.bus import Bus
from shared.coordination import CoordinationUnavailable
from shared.runtime import NodeContext, api_error

__all__ = ["fleet_view", "inbox_depths", "unplaceable"]

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


async def fleet_view(ctx: NodeContext, *, inbox: bool = False) -> dict[str, Any]:
    """The ``GET /fleet`` answer (the shape is the route's docstring).

    Raises:
        HTTPException: 503 ``lease store unavailable`` when the lease store cannot be read.
    """
    if ctx.coord is None:
        raise api_error(503, "lease store unavailable", "the node has not connected to its broker yet")
    seats = [s.handle for s in ctx.org.seats] if ctx.org is not None else None
    try:
        view = await leases.fleet_view(ctx.coord, seats=seats)
    except CoordinationUnavailable as e:
        raise api_error(503, "lease store unavailable", str(e)) from None
    view["unplaceable_seats"] = unplaceable(view, ctx.org) if ctx.org is not None else []
    view["asked"] = ctx.node_id
    try:  # FL-117: each node's config epoch, status and error; an aged-out status reads absent
        statuses = await control.read_statuses(ctx.coord)
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
    rec = ctx.extras.get("control")
    view["config_epoch"] = getattr(rec, "target", None)
    if inbox:
        handles = sorted(set(seats or []) | {s["seat"] for s in view["seats"]})
        view["inboxes"] = await inbox_depths(ctx.extras.get("bus"), handles)
    return view
