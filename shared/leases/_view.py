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

__all__ = ["RoleWatch", "fleet_view"]


async def fleet_view(coord: Coordination, *, seats: list[str] | None = None) -> dict[str, Any]:
    """Return live nodes, seat ownership, duty holders and unmanned roles.

    Args:
        coord: The coordination store.
        seats: Every agent seat handle of the active company (to list unowned seats), or None.

    Returns:
        ``{"nodes": [...], "seats": [...], "duties": [...], "unmanned_roles": [...],
        "unowned_seats": [...]}``; nodes carry ``id``, ``roles``, ``labels``, ``broker``, ``protocol``,
        ``posture``, ``owner``, ``renewed_at`` (ISO-8601 instant of the last heartbeat), and ``mcp``
        (the node's MCP start rows ``{server, started, failed, reason}``, FL-46).

    Raises:
        CoordinationUnavailable: the lease store could not be read.
    """
    entries = await coord.entries("leases")
    duty_entries = await coord.entries("duties", "worker.")
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
                    "mcp": m.get("mcp") if isinstance(m.get("mcp"), list) else [],
                    "renewed_at": e.created.isoformat(),
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


_LOST = {
    "data": "stateless seats' tracker and knowledge tools fail; nothing holds the estate",
    "ingress": "no webhook arrives and the API is down",
    "seats": "triggers queue unread; no turn runs",
    "workers": "nothing fires on schedule, no sandbox run is collected, no retention sweep runs",
}


class RoleWatch:
    """Logs ``fleet_role_unmanned`` / ``fleet_role_manned`` on changes of the assembled fleet (FL-20).

    Every node runs the check on its sweep tick against live presence (not as a duty: a duty needs
    the ``workers`` role, and the role most worth reporting is ``workers`` itself). A role is logged
    once when it becomes unmanned and once when it comes back, not on every tick.
    """

    def __init__(self) -> None:
        self._unmanned: set[str] | None = None

    def check(self, view: dict[str, Any]) -> tuple[list[str], list[str]]:
        """Compare ``view["unmanned_roles"]`` with the last check and log the changes.

        Args:
            view: A :func:`fleet_view` answer.

        Returns:
            ``(newly_unmanned, newly_manned)`` role names.
        """
        from shared import logs

        log = logs.get("fleet.roles")
        now = set(view.get("unmanned_roles", []))
        before = self._unmanned if self._unmanned is not None else set()
        gone = sorted(now - before)
        back = sorted(before - now) if self._unmanned is not None else []
        for role in gone:
            log.warning("fleet_role_unmanned", role=role, lost=_LOST.get(role, ""))
        for role in back:
            log.info("fleet_role_manned", role=role)
        self._unmanned = now
        return gone, back
