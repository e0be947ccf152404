"""Fair share with placement groups: the fleet's placement policy (FL-18, FL-45, FL-56..FL-62, FL-134).

Each sweep (every 5 s) reads the ``leases`` bucket once: live presence (``node.*``) and seat leases
(``seat.*``). Then, per placement group (seats with the same ``role.placement``):

- the eligible nodes are the live nodes that run ``seats`` and are not draining (FL-18: others are
  not in the denominator; roles that are absent or malformed read as all four, FL-11; a draining
  node's presence says ``draining``, FL-129; nor shedding, FL-113; nor ``unserviceable``, FL-63) and match the group's
  node pin and labels (FL-57); this node always counts itself with its own labels (FL-45);
- the group's share is ``ceil(group size / eligible nodes)`` (FL-59), spent on that group only;
- the most constrained groups (fewest eligible nodes) are served first;
- a node over its share of a group gives the surplus back (``rebalance``), a seat that stopped
  matching is handed back (``placement``, FL-62); at most 2 voluntary releases per sweep;
- it claims unowned seats up to its share; at most 4 claims per sweep window of seats that start
  MCP child processes (FL-56: the limiter is sized against forking those process trees), while a
  seat that spawns nothing (``spawns(handle)`` False) is claimed without spending that budget, so a
  takeover of seats without stdio servers completes on the first sweep after the TTL;
- a group no live seats node matches is ``seats_unplaceable`` (logged once per change, with the
  handles and selector): the engine never widens a selector (FL-61).

The protocol gate (FL-134): while any live presence or seat lease carries a lower protocol than this
build's, the plan claims nothing and ``seat_claims_blocked_by_older_protocol`` is logged once per
change of state; presence itself is ungated (FL-44), and seats already held are kept (older nodes
keep working, newer ones wait). The gate is read once per sweep.

Not yet: the ``preferred`` ordering of FL-54, undead charging (FL-60), and releasing a seat claimed in the instant between the gate's read and the claim (the
check → claim → re-check of FL-134).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared import logs
from shared.coordination import Coordination

from ._placement import Plan, ReleaseReason
from ._records import LeaseRecord, resource_of

__all__ = ["MAX_CLAIMS_PER_SWEEP", "MAX_RELEASES_PER_SWEEP", "FairShare", "Selector"]

MAX_CLAIMS_PER_SWEEP = 4
"""New claims per sweep window of seats that spawn MCP children (FL-56): the cost is forking a seat's
tool servers, not the lease; seats that spawn nothing are not counted."""
MAX_RELEASES_PER_SWEEP = 2
"""Voluntary releases per sweep (FL-56): a release interrupts a live agent."""
SWEEP_WINDOW = 5.0
"""Seconds over which the claim budget is counted (the sweep interval, FL-56)."""

_log = logs.get("seat.placement")


@dataclass(frozen=True)
class Selector:
    """A seat's placement (FL-57): a node pin and labels that must all match exactly."""

    node: str | None = None
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        """An injective encoding of the selector: the placement group key (FL-59)."""
        import json

        return json.dumps([self.node, list(self.labels)])

    def matches(self, node_id: str, labels: Mapping[str, str]) -> bool:
        """True when a node with ``node_id`` and ``labels`` satisfies every part (a missing key never matches)."""
        if self.node is not None and self.node != node_id:
            return False
        return all(k in labels and labels[k] == v for k, v in self.labels)

    def describe(self) -> str:
        """``node=<id> labels=k=v,...`` or ``anywhere`` (the ``seats_unplaceable`` format)."""
        parts = []
        if self.node is not None:
            parts.append(f"node={self.node}")
        if self.labels:
            parts.append("labels=" + ",".join(f"{k}={v}" for k, v in self.labels))
        return " ".join(parts) or "anywhere"


@dataclass
class _Node:
    id: str
    labels: dict[str, str]
    protocol: int


@dataclass
class FairShare:
    """The fleet placement policy for a :class:`~shared.leases.SeatHost` (FL-56..FL-62).

    Args:
        coord: The coordination store (the ``leases`` bucket).
        node_id: This node's id.
        labels: This node's labels (its in-process profile wins over its presence row, FL-45).
        protocol: This build's lease protocol (FL-133).
        selectors: Returns every agent seat's :class:`Selector` (org-derived, re-read every sweep so an
            apply that narrows a selector takes effect, FL-62).
        spawns: ``spawns(handle)`` is True when claiming the seat starts MCP child processes (a
            per-seat stdio server, CO-34); only those claims spend the 4-per-window budget. None
            counts every claim (the seeds' original limiter).
    """

    coord: Coordination
    node_id: str
    labels: Mapping[str, str]
    protocol: int
    selectors: Callable[[], Mapping[str, Selector]]
    protocol_floor: int | None = None
    unplaceable: dict[str, str] = field(default_factory=dict)
    capacity: int = 0
    live_nodes: int = 1
    _blocked: bool = False
    _recent_claims: list[float] = field(default_factory=list)
    clock: Callable[[], float] = time.monotonic
    spawns: Callable[[str], bool] | None = None

    async def _read(self) -> tuple[list[_Node], dict[str, LeaseRecord], int]:
        nodes: dict[str, _Node] = {}
        owners: dict[str, LeaseRecord] = {}
        floor = self.protocol
        for entry in await self.coord.entries("leases"):
            res = resource_of(entry.key)
            rec = LeaseRecord.decode(entry.key, entry.value)
            if res.startswith("node:"):
                floor = min(floor, rec.protocol)
                if "seats" not in rec.roles:
                    continue
                if (
                    rec.meta.get("draining") is True
                    or rec.meta.get("unserviceable") is True
                    or rec.meta.get("posture") in ("shed", "stuck")
                ):
                    # A draining node is handing its seats off (FL-129): counting it would keep
                    # every peer at its share and leave each seat it releases unowned until its
                    # presence goes, after its longest turn (FL-47 keeps it listed, not counted).
                    # A shedding node gave its seats back (FL-113): peers take its share. So did
                    # an unserviceable one, which cannot reach the estate (FL-63).
                    continue
                labels = rec.meta.get("labels")
                nodes[rec.node or res[5:]] = _Node(
                    rec.node or res[5:], dict(labels) if isinstance(labels, dict) else {}, rec.protocol
                )
            elif res.startswith("seat:"):
                floor = min(floor, rec.protocol)
                owners[res[5:]] = rec
        nodes[self.node_id] = _Node(self.node_id, dict(self.labels), self.protocol)  # FL-45
        return sorted(nodes.values(), key=lambda n: n.id), owners, floor

    async def plan(self, seats: Sequence[str], held: Mapping[str, int]) -> Plan:
        """See :meth:`shared.leases.PlacementPolicy.plan`.

        Raises:
            CoordinationUnavailable: the lease bucket could not be read (the sweep is skipped).
        """
        nodes, owners, floor = await self._read()
        self.live_nodes = len(nodes)
        blocked = floor < self.protocol
        if blocked != self._blocked:
            if blocked:
                _log.warning("seat_claims_blocked_by_older_protocol", protocol=self.protocol, floor=floor)
            else:
                _log.info("seat_claims_unblocked", protocol=self.protocol)
            self._blocked = blocked
        self.protocol_floor = floor if blocked else None
        selectors = self.selectors()
        groups: dict[str, list[str]] = {}
        sel_of: dict[str, Selector] = {}
        for h in seats:
            sel = selectors.get(h, Selector())
            groups.setdefault(sel.key, []).append(h)
            sel_of[sel.key] = sel
        eligible = {key: [n for n in nodes if sel_of[key].matches(n.id, n.labels)] for key in groups}
        unplaceable = {
            h: sel_of[key].describe() for key, hs in groups.items() if not eligible[key] for h in hs
        }
        if unplaceable != self.unplaceable:
            if unplaceable:
                _log.warning(
                    "seats_unplaceable",
                    seats=sorted(unplaceable),
                    selectors=sorted(set(unplaceable.values())),
                )
            self.unplaceable = unplaceable
        releases: dict[str, ReleaseReason] = {}
        claims: list[str] = []
        capacity = 0
        order = sorted(groups, key=lambda k: (len(eligible[k]), k))  # most constrained first
        for key in order:
            members = groups[key]
            if not any(n.id == self.node_id for n in eligible[key]):
                for h in members:
                    if h in held:
                        releases.setdefault(h, "placement")  # FL-62: stopped matching
                continue
            share = math.ceil(len(members) / len(eligible[key]))
            capacity += share
            mine = [h for h in members if h in held]
            if len(mine) > share:
                for h in mine[share:]:  # the surplus, latest in org order first to keep
                    releases.setdefault(h, "rebalance")
                continue
            free = [h for h in members if h not in held and h not in owners]
            claims += free[: share - len(mine)]
        self.capacity = capacity
        if blocked:  # FL-134: claim nothing while an older protocol is live
            claims = []
        limited = dict(list(releases.items())[:MAX_RELEASES_PER_SWEEP])
        return Plan(claim=self._limit(claims), release=limited)

    def _limit(self, claims: list[str]) -> list[str]:
        """At most 4 claims of spawning seats per sweep window, also when a release nudged an extra
        sweep (FL-56); seats that spawn nothing pass without spending the budget. Order is kept."""
        now = self.clock()
        self._recent_claims = [t for t in self._recent_claims if now - t < SWEEP_WINDOW]
        budget = max(0, MAX_CLAIMS_PER_SWEEP - len(self._recent_claims))
        out: list[str] = []
        for handle in claims:
            if self.spawns is not None and not self.spawns(handle):
                out.append(handle)
            elif budget > 0:
                budget -= 1
                self._recent_claims.append(now)
                out.append(handle)
        return out

    def health(self) -> dict[str, Any]:
        """Fields for ``/health``'s seats block (FL-126, FL-135)."""
        out: dict[str, Any] = {"capacity": self.capacity, "live_nodes": self.live_nodes}
        if self.protocol_floor is not None:
            out["protocol_floor"] = self.protocol_floor
        if self.unplaceable:
            out["unplaceable"] = sorted(self.unplaceable)
        return out
