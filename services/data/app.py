"""The ``data`` role (FL-15, ES-1..ES-40): this node's copy of the estate.

At start: open the estate under ``store.dir`` (``estate.db``), provision the log streams (replicas
from ``stream.replicas``; an existing stream is never rewritten), start one applier per domain,
answer router calls on ``crewlet.estate.rpc.<node_id>``, publish positions every 10 s, wait (up to
30 s) for the copy to be level, then seed the company's projects and spaces through the log. The
estate is left in ``ctx.extras["estate"]`` so this node's router answers its own calls in-process,
and the node-local event log in ``ctx.extras["events"]``. Once ready it joins the custody group
(ES-78, FL-86): the events of nodes without data are written into this node's log, then acked.

On drain the RPC subscription stops taking calls and the calls in hand finish; on stop the
appliers finish their batch and the files are closed.
"""

from __future__ import annotations

from typing import Any

from shared import estate, leases, logs
from shared.bus import BusUnavailable, Custodian
from shared.router import RpcServer
from shared.runtime import CompanySnapshot, NodeContext, RoleService

from .events import EventLog, estate_event

__all__ = ["LEVEL_WAIT", "DataRole", "service"]

_log = logs.get("data")
LEVEL_WAIT = 30.0
"""Seconds the start waits for the copy to reach its logs' end before seeding and going ready."""


class DataRole:
    """The data role's state on one node and its steps: what :meth:`start` opened, closed in order."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.events: EventLog | None = None
        self.estate: Any = None
        self.sweeper: Any = None
        self.backup_age: Any = None
        self.slices: Any = None
        self.server: RpcServer | None = None
        self.custodian: Custodian | None = None

    async def start(self, ctx: NodeContext) -> None:
        """Open the node's event log and the estate, serve it, wait to be level, seed, join custody."""
        if ctx.link is None:
            raise estate.Refused("broker_unreachable", "the data role needs the broker connection")
        events = EventLog.open(ctx.cfg.store_dir / "node.db", node_id=ctx.node_id)
        self.events = events
        ctx.extras["events"] = events
        est = await self._open_estate(ctx, events)
        sweeper = estate.LedgerSweeper(est.store, ledger_days=ctx.cfg.retention.ledger_days)  # ES-8, ES-85
        sweeper.start()
        self.sweeper = sweeper
        age = estate.BackupAgeWatch(  # ES-82/ES-92 backup_age, on the heartbeat's alarms
            ctx.node_id, ctx.cfg.store_dir, ctx.cfg.retention.backup_max_age, est.beat.alarms
        )
        age.start()
        self.backup_age = age
        await self._serve(ctx, est)
        if not await est.wait_level(LEVEL_WAIT):
            _log.warning(
                "estate_not_level_at_start",
                waited_seconds=LEVEL_WAIT,
                lag={d: a.lag for d, a in est.appliers.items()},
            )
        seeded = await est.seed(ctx.org)
        _log.info("estate_ready", positions=est.service.positions(), seeded=len(seeded))
        await self._join_custody(ctx, events)

    async def _open_estate(self, ctx: NodeContext, events: EventLog) -> Any:
        """Open the estate (ES-1..ES-40) with its write hook, seat fence and trim floors; held in extras."""
        assert ctx.link is not None
        est = await estate.open_estate(
            ctx.link.js,
            node_id=ctx.node_id,
            store_dir=ctx.cfg.store_dir,
            replicas=ctx.cfg.stream.replicas,
            rules=estate.rules_from_company(ctx.company, ctx.org),
            positions_bucket=f"{ctx.cfg.coordination.bucket_prefix}_positions",
            wal_limit=ctx.cfg.retention.wal_limit_bytes,
            checkpoint_interval=ctx.cfg.retention.checkpoint_interval,
            nc=ctx.link.nc,
            snapshot_dir=ctx.cfg.snapshot_dir,
            snapshot_interval=ctx.cfg.stream.tracker_retention.snapshot_interval,
            coord=ctx.coord,
        )

        def on_write(op: str, call: estate.Call, answer: dict[str, Any]) -> None:
            ev = estate_event(ctx.node_id, op, call, answer)
            if ev is not None:
                events.record(ev)

        est.service.on_write = on_write
        coord = ctx.coord

        async def fence_check(seat: str, epoch: int) -> bool:
            # FL-74: a seat's write under an epoch older than the seat's current one is refused
            assert coord is not None
            return await leases.check_epoch(coord, seat, epoch)

        if coord is not None:
            est.service.fence_check = fence_check
        self.estate = est
        ctx.extras["estate"] = est
        est.service.coord = coord  # the write fence reads the published trim floors (ES-50)
        return est

    async def _serve(self, ctx: NodeContext, est: Any) -> None:
        """Answer search slices (ES-62) and router calls on ``crewlet.estate.rpc.<node_id>``."""
        assert ctx.link is not None
        # ES-62: a search of a large corpus is divided among the live data nodes; this node answers
        # its peers' slices on crewlet.search.slice.<node>
        divided = estate.DividedSearch(
            ctx.link.nc, ctx.coord, node_id=ctx.node_id, store=est.store, serve=est.service.serve_copy
        )
        slices = estate.SliceResponder(ctx.link.nc, node_id=ctx.node_id, serve=est.service.serve_copy)
        est.service.searcher = divided.serve
        await slices.start()
        self.slices = slices
        server = RpcServer(ctx.link.nc, node_id=ctx.node_id, handler=est.service.serve)
        await server.start()
        self.server = server

    async def _join_custody(self, ctx: NodeContext, events: EventLog) -> None:
        """Join the custody group (ES-78, FL-86); a failure is logged, the node still serves."""
        assert ctx.link is not None

        async def keep(ev: dict[str, Any]) -> bool:  # ES-78: write, read back, then the custodian acks
            events.record(ev)
            await events.flush()
            return await events.get(str(ev["event_id"])) is not None

        custodian = Custodian(ctx.link.js, node_id=ctx.node_id, write=keep)
        try:
            await custodian.start()
            self.custodian = custodian
        except BusUnavailable as e:  # logged: the node serves; custody waits in the stream for a peer
            _log.warning("custody_join_failed", error=str(e))

    async def drain(self, ctx: NodeContext) -> None:
        """Leave custody, stop taking router calls (those in hand finish), stop the slice responder."""
        custodian, self.custodian = self.custodian, None
        if custodian is not None:
            await custodian.stop()
        server, self.server = self.server, None
        if server is not None:
            await server.stop()
        slices, self.slices = self.slices, None
        if slices is not None:
            await slices.stop()

    async def stop(self, ctx: NodeContext) -> None:
        """Stop the sweeper and the backup-age watch, close the estate, then the event log."""
        sweeper, self.sweeper = self.sweeper, None
        if sweeper is not None:
            await sweeper.stop()
        age, self.backup_age = self.backup_age, None
        if age is not None:
            await age.stop()
        est, self.estate = self.estate, None
        ctx.extras.pop("estate", None)
        if est is not None:
            await est.close()
        events, self.events = self.events, None
        ctx.extras.pop("events", None)
        if events is not None:
            events.close()

    async def apply(self, ctx: NodeContext, snap: CompanySnapshot, prepared: Any) -> list[str]:
        """New rules and the company's projects and spaces, seeded through the log (idempotent)."""
        # before start (the boot's apply) the start seeds what the company names
        est = self.estate
        if est is None:
            return []
        est.service.rules = estate.rules_from_company(snap.company, snap.org)
        await est.seed(snap.org)  # idempotent: derived op ids; new projects and spaces appear
        return ["tracker_projects", "knowledge_containers"]


def service(ctx: NodeContext) -> RoleService:
    """Build the data role for ``ctx`` (:class:`DataRole`'s hooks)."""
    role = DataRole(ctx)
    return RoleService(name="data", start=role.start, drain=role.drain, stop=role.stop, apply=role.apply)
