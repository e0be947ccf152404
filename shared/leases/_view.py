"""The fleet view behind ``GET /fleet`` and ``crewlet fleet status`` (FL-117, FL-152).

Read from the lease bucket (one pass), never by fanning probes out to peers, so every ingress
node answers the same ownership. An unreadable store raises; the route answers 503 — never an
empty fleet.
"""

from __future__ import annotations

from typing import Any

from shared.config import ALL_ROLES
from shared.coordination import Coordination

from ._records import LeaseRecord, resource_of

__all__ = ["fleet_view"]


async def fleet_view(coord: Coordination, *, seats: list[str] | None = None) -> dict[str, Any]:
    """Return live nodes, seat ownership, duty holders and unmanned roles.

    Args:
        coord: The coordination store.
        seats: Every agent seat handle of the active company (to list unowned seats), or None.

    Returns:
        ``{"nodes": [...], "seats": [...], "duties": [...], "unmanned_roles": [...],
        "unowned_seats": [...]}``; nodes carry ``id``, ``roles``, ``labels``, ``broker``, ``protocol``,
        ``posture``, ``owner``.

    Raises:
        CoordinationUnavailable: the lease store could not be read.
    """
    entries = await coord.entries("leases")
    duty_entries = await coord.entries("duties")
    nodes: list[dict[str, Any]] = []
    owned: list[dict[str, Any]] = []
    for e in entries:
        rec = LeaseRecord.decode(e.key, e.value)
        res = resource_of(e.key)
        if res.startswith("node:"):
            m = rec.meta
            nodes.append(
                {
                    "id": rec.node or res[5:],
                    "owner": rec.owner,
                    "roles": rec.roles,
                    "labels": m.get("labels") if isinstance(m.get("labels"), dict) else {},
                    "broker": m.get("broker")
                    if m.get("broker") in ("member", "leaf", "client")
                    else "unknown",
                    "protocol": rec.protocol,
                    "posture": m.get("posture", "unknown"),
                    "applied_epoch": m.get("applied_epoch", 0),
                    "seats_held": m.get("seats_held", 0),
                    "in_flight": m.get("in_flight", 0),
                }
            )
        elif res.startswith("seat:"):
            owned.append(
                {
                    "seat": res[5:],
                    "node": rec.node,
                    "owner": rec.owner,
                    "epoch": rec.epoch,
                    "renewed_at": e.created.isoformat(),
                }
            )
    duties = []
    for e in duty_entries:
        rec = LeaseRecord.decode(e.key, e.value)
        duties.append(
            {"duty": resource_of(e.key)[7:], "node": rec.node, "owner": rec.owner, "epoch": rec.epoch}
        )
    manned = {r for n in nodes for r in n["roles"]}
    unowned = sorted(set(seats or []) - {s["seat"] for s in owned})
    return {
        "nodes": sorted(nodes, key=lambda n: n["id"]),
        "seats": sorted(owned, key=lambda s: s["seat"]),
        "duties": sorted(duties, key=lambda d: d["duty"]),
        "unmanned_roles": [r for r in ALL_ROLES if r not in manned],
        "unowned_seats": unowned,
    }
