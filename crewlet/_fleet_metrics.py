"""The fleet as this node sees it, as Prometheus series evaluated at scrape time (FL-6, FL-117).

:class:`FleetCollector` is a custom ``prometheus_client`` collector of the series named in
:data:`shared.telemetry.FLEET_SERIES`. ``/metrics`` awaits :meth:`FleetCollector.refresh` (cached
:data:`CACHE_SECONDS`) and then renders; :meth:`FleetCollector.collect` only reads the snapshot,
so rendering never blocks on the broker. The view is the one ``GET /fleet`` serves
(:func:`shared.leases.fleet_view` plus the ``crewlet_status`` rows of
:func:`shared.control.read_statuses`), this node's estate appliers and the mailboxes of the seats
held here. Every node serves it (see ``crewlet.node``); fleet-wide series come from every node's
view alike, and dashboards aggregate them with ``max by (...)``.

It lives in the node's composition because it reads the lease store, the control rows, the estate
and the bus: above every package it reads, never below them (the telemetry seam only names the
series).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from shared import control, leases, logs
from shared.telemetry import FLEET_SERIES

__all__ = ["CACHE_SECONDS", "FleetCollector"]

_log = logs.get("telemetry")

CACHE_SECONDS = 1.0
"""How long one refresh answers scrapes (seconds)."""
REFRESH_BUDGET = 3.0
"""Seconds one refresh may spend asking the broker before it gives up (the last view is dropped)."""

_Sample = tuple[str, tuple[str, ...], float]


class FleetCollector(Collector):
    """Fleet series of one node (see the module docstring), read from a snapshot.

    Args:
        ctx: The node's :class:`~shared.runtime.NodeContext` (``coord``, ``org``, ``seats_held``,
            ``extras["bus"]``, ``extras["estate"]``).
        cache_seconds: How long a refresh stays fresh.
    """

    def __init__(self, ctx: Any, *, cache_seconds: float = CACHE_SECONDS) -> None:
        self._ctx = ctx
        self._ttl = cache_seconds
        self._at = -1e9
        self._lock = asyncio.Lock()
        self._samples: list[_Sample] = [("crewlet_fleet_view_readable", (), 0.0)]

    def describe(self) -> list[GaugeMetricFamily]:
        """The families without samples (registration never triggers a refresh)."""
        return [GaugeMetricFamily(n, h, labels=list(lb)) for n, (h, lb) in FLEET_SERIES.items()]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the last snapshot; families with no sample are left out."""
        fams = {n: GaugeMetricFamily(n, h, labels=list(lb)) for n, (h, lb) in FLEET_SERIES.items()}
        for name, labels, value in self._samples:
            fams[name].add_metric(list(labels), value)
        yield from (f for f in fams.values() if f.samples)

    async def refresh(self) -> None:
        """Rebuild the snapshot unless the last one is younger than ``cache_seconds``; never raises."""
        async with self._lock:
            if time.monotonic() - self._at < self._ttl:
                return
            samples: list[_Sample] = []
            try:
                async with asyncio.timeout(REFRESH_BUDGET):
                    samples += await self._fleet()
            except Exception:  # noqa: BLE001 - an unreadable store shows as readable 0, never a 500
                samples = [("crewlet_fleet_view_readable", (), 0.0)]
            samples += self._estate()
            try:
                async with asyncio.timeout(REFRESH_BUDGET):
                    samples += await self._mailboxes()
            except Exception as e:  # noqa: BLE001 - a broker hiccup leaves the mailbox series out
                _log.debug("metrics_mailboxes_unread", error=f"{type(e).__name__}: {e}")
            self._samples = samples
            self._at = time.monotonic()

    async def _fleet(self) -> list[_Sample]:
        coord = self._ctx.coord
        if coord is None:
            return [("crewlet_fleet_view_readable", (), 0.0)]
        view = await leases.fleet_view(coord)
        statuses = await control.read_statuses(coord)
        out: list[_Sample] = [("crewlet_fleet_view_readable", (), 1.0)]
        for n in view["nodes"]:
            node, st = str(n["id"]), statuses.get(n["id"])
            posture = st.posture if st is not None else n.get("posture", "unknown")
            roles = ",".join(sorted(n.get("roles") or []))
            info = (node, roles, str(n.get("broker")), str(n.get("protocol")), str(posture))
            out.append(("crewlet_node_info", info, 1.0))
            epoch = st.applied_epoch if st is not None else n.get("applied_epoch", 0)
            out.append(("crewlet_node_config_epoch", (node,), float(epoch or 0)))
            out.append(("crewlet_node_seats_held", (node,), float(n.get("seats_held") or 0)))
            out.append(("crewlet_node_turns_in_flight", (node,), float(n.get("in_flight") or 0)))
        for s in view["seats"]:
            out.append(("crewlet_seat_epoch", (str(s["seat"]), str(s["node"])), float(s["epoch"])))
        for d in view["duties"]:
            out.append(("crewlet_duty_holder", (str(d["duty"]), str(d["node"])), 1.0))
        return out

    def _estate(self) -> list[_Sample]:
        est = self._ctx.extras.get("estate")
        appliers = getattr(getattr(est, "service", None), "appliers", None) or {}
        node, now = self._ctx.node_id, time.monotonic()
        out: list[_Sample] = []
        for domain, a in sorted(appliers.items()):
            lag = max(0, int(a.log_last) - int(a.applied))
            behind = now - a.behind_since if lag and a.behind_since is not None else 0.0
            out.append(("crewlet_estate_apply_lag_records", (node, domain), float(lag)))
            out.append(("crewlet_estate_apply_behind_seconds", (node, domain), round(behind, 3)))
        return out

    async def _mailboxes(self) -> list[_Sample]:
        bus = self._ctx.extras.get("bus")
        if bus is None:
            return []
        node = self._ctx.node_id
        out: list[_Sample] = []
        for seat in sorted(self._ctx.seats_held):
            st = await bus.state(seat)
            out.append(("crewlet_mailbox_pending_messages", (node, seat), float(st.pending)))
            out.append(("crewlet_mailbox_ack_pending_messages", (node, seat), float(st.ack_pending)))
        return out
