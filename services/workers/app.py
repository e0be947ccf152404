"""The ``workers`` role: the company-wide singleton duties (FL-15, FL-19, FL-91..FL-95).

Each duty loop claims its ``worker:{duty}`` lease on every tick and runs the tick only while it
holds it (:class:`shared.leases.Duties`); a node without this role never asks (and so refuses
every duty). Duties built:

- ``scheduler``: evaluates every schedule of the org and fires what is due (CO-33), every
  ``scheduling.tick_seconds`` (10 s), with the catch-up rule after any gap
  (:mod:`services.workers.scheduler`). A fire is a ``task_assigned`` envelope (``source:
  schedule``) on the seat's inbox, deduplicated on the claim key, whose payload is ``{text,
  source: "schedule", schedule, scope, fire_label, fired_at, timeout_seconds, catchup}``:
  ``fire_label`` the local wall clock ``YYYYmmddTHHMM``, ``fired_at`` the slot's UTC instant
  (RFC 3339), ``timeout_seconds`` the schedule's wall-clock cap of the turn (seconds; the turn
  engine checks it between rounds and fails the turn ``scheduled_timeout``). While the node sheds
  (posture ``shed``/``stuck``) a tick is skipped whole and the window stays open, caught up after
  convergence (FL-97); while ``scheduling.enabled`` is false nothing fires and the window follows
  the clock (no catch-up of the disabled time);
- ``maintenance``: node-local retention on the holder (turn records older than 30 days, FL-99),
  then the A2A channel sweep (idle channels closed after 1 h, closed ones deleted after 7 days;
  :func:`shared.channels.sweep_channels`), every 5 minutes;
- ``retention``: the trim of the tracker and pages logs (ES-47, ES-48), every ``retention.trim_tick``
  (15 min): publish each log's floor to ``trim_floors``, then purge below it
  (:mod:`services.workers.retention`);
- ``objects``: the object-store collector (ES-75, FL-5), hourly (``CREWLET_OBJECTS_COLLECT_SECONDS``):
  pins the estate, deletes unnamed objects older than 24 h, audits every named one, records its
  findings in the ``objects`` slot and raises ``objects_missing`` (:mod:`services.workers.objects`).
  Skipped while the node drains or sheds, and in the maintenance/seal modes of ES-89.
- ``embedding``: the embedding duty (AG-11, ES-67), each minute while the company has
  ``providers.embeddings``: embeds changed pages' windows into the ``vectors`` log, withdraws gone
  ones, sets the coverage gauge and ``recall_below_floor`` (:mod:`services.workers.embedding`).

Drain: each loop finishes its current tick, then its duty is given back, so a peer takes it on its
next tick instead of after the TTL (FL-95). The fleet-role check (FL-20) is not a duty here: every
node runs it on its own sweep, because the role it most needs to report is ``workers`` itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from shared import channels, logs, records
from shared.bus import Bus, BusUnavailable, Envelope
from shared.estate._alarms import Alarms
from shared.estate.log import evicted_since, eviction_grace
from shared.leases import Duties
from shared.runtime import PROTOCOL_VERSION, CompanySnapshot, NodeContext, RoleService

from .embedding import HEARTBEAT, EmbeddingDuty
from .objects import Collector, objects_heartbeat
from .retention import Retention, RetentionSettings
from .scheduler import Fire, Scheduler

__all__ = ["MAINTENANCE_INTERVAL", "TURN_RETENTION", "WorkersRole", "service"]

MAINTENANCE_INTERVAL = 300.0
"""Seconds between maintenance ticks."""
TURN_RETENTION = timedelta(days=30)
"""How long finished turn records are kept in ``node.db``."""

_log = logs.get("workers")


class WorkersRole:
    """The workers role's state on one node and its duty ticks (FL-91..FL-95).

    :meth:`start` creates the duty leases (:class:`shared.leases.Duties`) and one loop per duty;
    each ``*_tick`` method is one duty's work, run only while this node holds its lease.
    """

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.tasks: list[asyncio.Task[None]] = []
        self.stopping = asyncio.Event()
        self.duties: Duties | None = None
        self.scheduler: Scheduler | None = None
        self.retention: Retention | None = None
        self.objects_alarms: Alarms | None = None
        self.embedding: EmbeddingDuty | None = None
        self.shed_logged = False

    async def loop(
        self, duties: Duties, duty: str, interval: Callable[[], float], tick: Callable[[], Awaitable[None]]
    ) -> None:
        """Claim ``duty`` every tick, run ``tick`` while held, give the duty back after the last (FL-95)."""
        stopping = self.stopping
        while not stopping.is_set():
            if await duties.try_acquire(duty) is not None:
                try:
                    await tick()
                except Exception as e:  # noqa: BLE001 - a failing tick must not end the loop
                    _log.error("duty_tick_failed", duty=duty, error=f"{type(e).__name__}: {e}")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stopping.wait(), interval())
        await duties.release(duty)  # after the last tick (FL-95)

    async def start(self, ctx: NodeContext) -> None:
        """Create the duty leases, the scheduler, retention and the objects alarms; start the loops."""
        if ctx.coord is None:
            return
        duties = Duties(
            ctx.coord,
            node_id=ctx.node_id,
            owner=ctx.owner,
            protocol=PROTOCOL_VERSION,
            workers="workers" in ctx.cfg.roles,
            lease_ttl=timedelta(seconds=ctx.cfg.coordination.lease_ttl_seconds),
        )
        self.duties = duties
        ctx.extras["duties"] = duties
        self.scheduler = Scheduler(ctx.coord, self.publish, holder=ctx.owner)
        ctx.extras["scheduler"] = self.scheduler
        if ctx.link is not None:
            self.retention = Retention(
                ctx.coord, ctx.link.js, node_id=ctx.node_id, settings=RetentionSettings.from_config(ctx.cfg)
            )
            ctx.extras["retention"] = self.retention
            self.retention.evicted = self.evicted
        self.objects_alarms = Alarms()
        ctx.extras["objects_alarms"] = self.objects_alarms
        self.embedding = EmbeddingDuty(ctx, Alarms())
        ctx.extras["embedding_duty"] = self.embedding
        self.tasks = [
            asyncio.create_task(
                self.loop(duties, "scheduler", self.tick_seconds, self.scheduler_tick), name="duty-scheduler"
            ),
            asyncio.create_task(
                self.loop(duties, "maintenance", lambda: MAINTENANCE_INTERVAL, self.maintenance_tick),
                name="duty-maintenance",
            ),
            asyncio.create_task(
                self.loop(
                    duties, "retention", lambda: float(ctx.cfg.retention.trim_tick), self.retention_tick
                ),
                name="duty-retention",
            ),
            asyncio.create_task(
                self.loop(duties, "objects", objects_heartbeat, self.objects_tick), name="duty-objects"
            ),
            asyncio.create_task(
                self.loop(duties, "embedding", lambda: HEARTBEAT, self.embedding.tick), name="duty-embedding"
            ),
        ]

    # -- scheduler (CO-33) ---------------------------------------------------------------------------

    async def publish(self, handle: str, fire: Fire) -> None:
        """Put one schedule fire on the seat's inbox as ``task_assigned`` (deduplicated on its claim key)."""
        bus = self.ctx.extras.get("bus")
        if not isinstance(bus, Bus):
            raise BusUnavailable("the bus is not open")
        env = Envelope.new(
            "task_assigned",
            source="schedule",
            payload={
                "text": fire.task,
                "source": "schedule",
                "schedule": fire.name,
                "scope": f"{fire.scope_type}:{fire.scope_id}",
                "fire_label": fire.label,
                "fired_at": fire.at.isoformat(),
                "timeout_seconds": fire.timeout_seconds,
                "catchup": fire.catchup,
            },
        )
        await bus.publish_to_seat(handle, env, msg_id=fire.claim_key)

    def tick_seconds(self) -> float:
        """``scheduling.tick_seconds`` of the applied org (10 s without one)."""
        ctx = self.ctx
        return float(ctx.org.company.scheduling.tick_seconds) if ctx.org is not None else 10.0

    async def scheduler_tick(self) -> None:
        """Fire what is due; skip to now while disabled; fire nothing while the node sheds (FL-97)."""
        ctx, scheduler = self.ctx, self.scheduler
        assert scheduler is not None
        if ctx.org is None:
            return
        if not ctx.org.company.scheduling.enabled:
            scheduler.skip_to(datetime.now(UTC))
            return
        if ctx.shedding:  # FL-97: a node behind the fleet fires nothing; the window stays open
            if not self.shed_logged:
                _log.warning("scheduler_shed", posture=ctx.posture)
                self.shed_logged = True
            return
        self.shed_logged = False
        await scheduler.tick(ctx.org)

    # -- maintenance, retention, objects -----------------------------------------------------------------

    async def maintenance_tick(self) -> None:
        """Prune old turn records (FL-99), then sweep the A2A channels."""
        ctx = self.ctx
        turns = ctx.extras.get("turns")
        if isinstance(turns, records.TurnStore):
            pruned = await records.prune_turns(turns, keep=TURN_RETENTION.total_seconds())
            if pruned:
                _log.info("maintenance_pruned", table="turns", rows=pruned)
        if ctx.coord is not None:
            # FL-99: idle A2A channels close, long-closed ones go; an unreadable listing raises
            # CoordinationUnavailable, logged by the duty loop as duty_tick_failed
            await channels.sweep_channels(ctx.coord)

    async def evicted(self, domain: str, now_us: int) -> list[str]:
        """ES-47: nodes evicted more than the grace ago stop counting (gates: the local copy)."""
        est = self.ctx.extras.get("estate")
        if est is None:
            return []
        since = await est.store.read(evicted_since)
        grace = int(eviction_grace() * 1_000_000)
        return [n for n, at in since.get(domain, {}).items() if now_us - at >= grace]

    async def retention_tick(self) -> None:
        """One trim of the tracker and pages logs (ES-47, ES-48), when the node has a broker link."""
        if self.retention is not None:
            await self.retention.tick()

    async def objects_tick(self) -> None:
        """One object-store collection (ES-75); skipped in maintenance/seal, draining or shedding."""
        ctx = self.ctx
        est = ctx.extras.get("estate")
        if ctx.objects is None or est is None or ctx.coord is None:
            return
        if ctx.extras.get("mode") in ("maintenance", "seal") or ctx.draining or ctx.shedding:
            return  # ES-75: not in maintenance/seal modes; a shedding node acts on nothing
        collector = ctx.extras.get("objects_collector")
        if not isinstance(collector, Collector) or collector.store is not ctx.objects:
            assert self.objects_alarms is not None  # made by start, before any loop
            collector = Collector(
                ctx.objects, est, ctx.coord, node_id=ctx.node_id, alarms=self.objects_alarms
            )
            ctx.extras["objects_collector"] = collector
        await collector.tick()

    # -- drain, apply ------------------------------------------------------------------------------------

    async def drain(self, ctx: NodeContext) -> None:
        """Each loop finishes its tick, then gives its duty back (FL-95); 30 s each at most."""
        self.stopping.set()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 30.0)

    async def apply(self, ctx: NodeContext, snap: CompanySnapshot, prepared: Any) -> list[str]:
        """The scheduler reads ``ctx.org`` at every tick: the swap is the whole apply (FL-114)."""
        return ["scheduler"]


def service(ctx: NodeContext) -> RoleService:
    """Build the workers role for ``ctx`` (:class:`WorkersRole`'s hooks)."""
    role = WorkersRole(ctx)
    return RoleService(name="workers", start=role.start, drain=role.drain, apply=role.apply)
