"""The ``seats`` role: claims seat leases, attaches their mailboxes, runs turns (FL-15, CO-7, CO-11).

Live apply (FL-114..FL-116): ``prepare`` builds the revision's provider clients and refuses one that
cannot be constructed for a reason other than an unset secret (status ``error``: the previous epoch
keeps running); ``apply`` builds a new turn engine beside the old one (a turn takes the engine once
at its start, so it finishes with the company it started with, FL-116), hands the seat host the new
seat set (a removed seat is released ``role_gone`` at the next sweep, its mail kept in its mailbox;
an added one is claimable by fair share) and sweeps at once. The old provider clients close once
no turn started before the swap still runs.

Start (after ``data`` on the same node, so the estate answers): create the seat host (leases with
epoch fencing, FL-48..FL-55) with the dispatcher's hooks, assign every agent seat of the applied
company, start renewing and sweeping. Posture (FL-113): on ``shed``/``stuck`` every seat is
released fenced (reason ``posture``) and none is claimed until the posture admits work again.
Drain: the seat host releases every seat voluntarily — each running turn finishes first, its
mailbox NAKs what it fetched and did not finish, then detaches (FL-65, FL-129). Stop: the
providers' clients close.

The node runner has put the bus in ``ctx.extras["bus"]`` and the turn records in
``ctx.extras["turns"]``; each apply created every seat's mailbox before the swap (FL-78).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from datetime import timedelta
from typing import Any

from shared import logs, providers, telemetry
from shared.budgets import Budgets
from shared.bus import Bus
from shared.leases import ClaimAll, FairShare, PlacementPolicy, SeatHost, Selector
from shared.mcp import McpPool, resolve_seat_servers, resolve_shared
from shared.mcp import spawns as mcp_spawns
from shared.memory import MemoryWriter, RoutedMemory
from shared.records import TurnStore
from shared.router import router_of
from shared.runtime import PROTOCOL_VERSION, CompanySnapshot, NodeContext, RoleService
from shared.turns import TurnEngine

from .admission import EstateWatch
from .dispatcher import Dispatcher
from .memory import SeatMemory
from .messages import requeue_abandoned
from .recall import SeatRecall

__all__ = ["RELEASED_SUBJECT", "SeatsRole", "service"]

RELEASED_SUBJECT = "crewlet.seats.released"
"""Core NATS subject a node publishes on after a voluntary seat release (ours; no payload but the
releasing owner); every seats node sweeps on it."""

_log = logs.get("seat.host")


def _unconstructable(provs: providers.ProviderSet) -> list[str]:
    """Provider entries that cannot be built for a reason other than a missing API key.

    A missing key (an unset ``${VAR}``, or none given) leaves its seats reading as stopped until a
    secret or a revision supplies one (CO-3, CO-5); a missing offline rules file, a model or
    base URL that is not there is a revision this node cannot run (FL-111).
    """
    return [reason for reason in provs.unconfigured.values() if "no usable API key" not in reason]


class SeatsRole:
    """The seats role's state on one node and its steps (FL-15): the RoleService hooks are its methods.

    Holds the MCP pool, the credential cooldowns, the current turn engine and providers, the seat
    host (where seat leases are claimed, through :class:`shared.leases.SeatHost`) and the dispatcher.
    """

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.retired: list[asyncio.Task[None]] = []
        self.pool = McpPool(ctx.node_id)
        ctx.extras["mcp_rows"] = self.pool.rows  # FL-46: the heartbeat carries the MCP start rows
        self._board: providers.CooldownBoard | None = None
        self._engine: TurnEngine | None = None
        self.providers: providers.ProviderSet | None = None
        self.host: SeatHost | None = None
        self.dispatcher: Dispatcher | None = None
        self.watch: EstateWatch | None = None
        self.released_sub: Any = None
        self.memory = SeatMemory(ctx)  # AG-7: hydrated before the seat's consumers attach

    # -- what the hooks read ---------------------------------------------------------------------

    def budgets(self) -> Budgets | None:
        """The node's one view of the shared budgets (CO-37), made by the node runner once the
        coordination store is open (``ctx.extras["budgets"]``, which also reports it, FL-120)."""
        found = self.ctx.extras.get("budgets")
        return found if isinstance(found, Budgets) else None

    def tool_memory(self) -> RoutedMemory | None:
        """The seats' memory the memory tools use (AG-2..AG-5): the node's writer (opened at boot,
        ``ctx.extras["memory"]``) with reads through the router; None when no writer is open."""
        writer = self.ctx.extras.get("memory")
        if not isinstance(writer, MemoryWriter):
            return None
        return RoutedMemory(writer, router_of(self.ctx))

    def board(self) -> providers.CooldownBoard:
        """The node's credential cooldowns (CO-42, FL-121): one per node, outliving applies.

        A single node (``coordination.type: local``) shares nothing; it still benches locally.
        """
        if self._board is None:
            ctx = self.ctx
            shared = ctx.coord if ctx.cfg.coordination.type != "local" else None
            self._board = providers.CooldownBoard(shared, ctx.node_id)
        return self._board

    def surface(self, handle: str) -> Any:
        """The seat's MCP tool surface (the turn engine asks per turn)."""
        return self.pool.surface(handle)

    def spawns(self, handle: str) -> bool:
        """Whether the seat forks MCP children (FL-56: only those spend the claim budget)."""
        org = self.ctx.org
        seat = org.seat(handle) if org is not None else None
        return seat is not None and org is not None and mcp_spawns(org, seat)

    def engine(self) -> TurnEngine:
        """The turn engine of the last apply (a turn takes it once at its start, FL-116)."""
        if self._engine is None:
            raise KeyError("engine")
        return self._engine

    def seat_handles(self) -> list[str]:
        """The seats this node may hold now: none while shedding or not admitted (FL-113, FL-144, FL-63)."""
        ctx = self.ctx
        if ctx.org is None or ctx.shedding:
            return []
        watch = self.watch
        if watch is not None and not watch.admitted:  # FL-144 admission, FL-63 withdrawal
            return []
        return [s.handle for s in ctx.org.seats]

    def selectors(self) -> dict[str, Selector]:
        """Each placed seat's selector (node, labels) for the fair share."""
        ctx = self.ctx
        out: dict[str, Selector] = {}
        for seat in ctx.org.seats if ctx.org is not None else ():
            p = seat.role.placement
            if p is not None:
                out[seat.handle] = Selector(p.node, tuple(sorted(p.labels.items())))
        return out

    # -- live apply (FL-114..FL-116) ----------------------------------------------------------------

    async def reconcile_mcp(self, snap: CompanySnapshot) -> None:
        """FL-115: shared servers and held seats' servers restart only where the resolved config moved."""
        pool = self.pool
        await pool.apply_shared(resolve_shared(snap.org.company))
        for handle in pool.held():
            seat, tools = snap.org.seat(handle), pool.seat(handle)
            # a seat released meanwhile keeps no set (a stopped set ignores an apply); a seat the
            # apply removed is released role_gone by the next sweep, its servers with it
            if seat is not None and tools is not None:
                await tools.apply(resolve_seat_servers(snap.org, seat))

    async def prepare(self, ctx: NodeContext, snap: CompanySnapshot) -> providers.ProviderSet:
        """Build the revision's provider clients; refuse one that cannot be built (FL-111)."""
        provs = providers.build_providers(snap.resolved, base_dir=snap.base_dir, board=self.board())
        bad = _unconstructable(provs)
        if bad:
            await provs.aclose()
            raise ValueError("; ".join(bad))
        return provs

    async def retire(self, old: providers.ProviderSet) -> None:
        """FL-116: turns started before the swap keep the old clients; close them once none runs."""
        while self.ctx.in_flight > 0:
            await asyncio.sleep(1.0)
        with contextlib.suppress(Exception):
            await old.aclose()

    async def apply(self, ctx: NodeContext, snap: CompanySnapshot, provs: Any) -> list[str]:
        """Swap in the new engine and providers, hand the seat host the new seat set, sweep now."""
        turns: TurnStore | None = ctx.extras.get("turns")
        old = self.providers
        self.providers = provs
        self._engine = TurnEngine(
            snap.org,
            provs,
            recorder=turns,
            metrics=telemetry.default_metrics(),
            epoch=snap.epoch,
            capture_content=ctx.cfg.telemetry.capture_content,
            secrets=snap.secret_values,
            mcp=self.surface,
            budgets=self.budgets(),
            recall=SeatRecall(ctx, self.memory, lambda: provs),  # AG-8
            memory=self.tool_memory(),  # AG-3..AG-5: the memory tools
        )
        await self.reconcile_mcp(snap)
        if old is not None and old is not provs:
            self.retired.append(asyncio.create_task(self.retire(old), name="providers-retire"))
        host = self.host
        if host is not None:
            host.assign(self.seat_handles())
            host.nudge()  # claim added seats and release removed ones now, not at the next sweep
        dispatcher = self.dispatcher
        if dispatcher is not None and dispatcher.parked:  # a raised ceiling releases parked seats now
            await dispatcher.check_parked()
        return ["seat_identities", "seat_tools"]

    # -- start: the seat host, where seat leases are claimed ----------------------------------------

    async def start(self, ctx: NodeContext) -> None:
        """Requeue abandoned messages, create the dispatcher and the seat host, assign, start (FL-48..FL-55)."""
        if ctx.coord is None:
            return
        if self._engine is None:
            _log.warning("seats_idle", reason="no active company")
        bus: Bus = ctx.extras["bus"]
        turns: TurnStore = ctx.extras["turns"]
        if turns.abandoned_at_open:  # killed mid-turn last time: those messages wait to run again
            requeued = await requeue_abandoned(ctx.coord, turns.abandoned_at_open)
            _log.info("messages_requeued", count=requeued, abandoned=len(turns.abandoned_at_open))
        await self.board().start()  # pulls the fleet's benches once now, then every 15 s (FL-121)
        dispatcher = Dispatcher(ctx, bus, self.engine, turns, mcp=self.pool, budgets=self.budgets())
        host, fair = self._seat_host(dispatcher)
        dispatcher.host = host
        if "data" not in ctx.cfg.roles and ctx.cfg.coordination.type != "local":
            self._watch_estate(host)
        bus_fence = ctx.extras.get("seat_fence")
        if isinstance(bus_fence, dict):
            bus_fence["fence"] = host.holds  # the bus asks the seat host before every ack (FL-74)
        self.host = host
        self.dispatcher = dispatcher
        ctx.extras["seats_health"] = lambda: {**host.health(), **(fair.health() if fair is not None else {})}
        ctx.extras["seat_host"] = host
        host.assign(self.seat_handles())
        host.start()
        if ctx.link is not None:

            async def on_released_elsewhere(msg: Any) -> None:
                if msg.data.decode(errors="replace") != ctx.owner:
                    host.nudge()  # a peer freed a seat: sweep now, not on the timer

            self.released_sub = await ctx.link.nc.subscribe(RELEASED_SUBJECT, cb=on_released_elsewhere)

    def _seat_host(self, dispatcher: Dispatcher) -> tuple[SeatHost, FairShare | None]:
        """The seat host with the dispatcher's hooks and the placement policy (fair share, FL-56)."""
        ctx = self.ctx
        assert ctx.coord is not None
        fair: FairShare | None = None
        policy: PlacementPolicy = ClaimAll()
        if ctx.cfg.coordination.type != "local":  # local leases: this node is the whole company
            fair = FairShare(
                ctx.coord,
                node_id=ctx.node_id,
                labels=dict(ctx.cfg.node.labels),
                protocol=PROTOCOL_VERSION,
                selectors=self.selectors,
                spawns=self.spawns,  # FL-56: only seats that fork MCP children spend the claim budget
            )
            policy = fair
        host = SeatHost(
            ctx.coord,
            node_id=ctx.node_id,
            owner=ctx.owner,
            protocol=PROTOCOL_VERSION,
            ttl=timedelta(seconds=ctx.cfg.coordination.lease_ttl_seconds),
            on_acquire=functools.partial(self.acquire, dispatcher),
            on_release=functools.partial(self.release, dispatcher),
            on_quiesce=dispatcher.on_quiesce,
            on_resume=dispatcher.on_resume,
            policy=policy,
            on_released=self.announce_release,
        )
        return host, fair

    async def acquire(self, dispatcher: Dispatcher, handle: str, epoch: int) -> None:
        """The memory step (AG-7: raising releases the seat ``acquire_failed``), then the attach."""
        await self.memory.hydrate(handle)
        await dispatcher.on_acquire(handle, epoch)

    async def release(self, dispatcher: Dispatcher, handle: str, reason: str) -> None:
        """Detach the seat, then forget its memory watermark and scratch cache (AG-7)."""
        await dispatcher.on_release(handle, reason)
        await self.memory.release(handle)

    async def announce_release(self, handle: str, reason: str) -> None:
        """Tell the fleet of a voluntary release at once (ours), so a successor claims within
        milliseconds rather than on its next 5 s sweep (its claim budget still applies)."""
        ctx = self.ctx
        if ctx.link is not None and not ctx.link.nc.is_closed:
            await ctx.link.nc.publish(RELEASED_SUBJECT, ctx.owner.encode())

    def _watch_estate(self, host: SeatHost) -> None:
        """A node without ``data`` holds seats only while the estate answers it (FL-144, FL-63)."""
        ctx = self.ctx

        async def on_admission(admitted: bool) -> None:
            host.assign(self.seat_handles())
            if admitted:
                host.nudge()
            else:  # FL-63: every seat back; a running turn finishes first (voluntary)
                await asyncio.gather(*(host.release(h, "unserviceable") for h in list(host.held())))

        watch = EstateWatch(ctx, router_of(ctx), on_change=on_admission)
        self.watch = watch
        watch.start()

    # -- posture, drain, stop ------------------------------------------------------------------------

    async def on_posture(self, ctx: NodeContext, posture: str) -> None:
        """FL-113: on shed/stuck every seat is released fenced (reason ``posture``); else sweep now."""
        host = self.host
        if host is None:
            return
        host.assign(self.seat_handles())
        if ctx.shedding:  # FL-113: released fenced, reason posture; the deliveries go to peers
            await asyncio.gather(*(host.release(h, "posture") for h in list(host.held())))
        else:
            host.nudge()

    async def drain(self, ctx: NodeContext) -> None:
        """Stop the estate watch; release every seat voluntarily, each running turn first (FL-65)."""
        watch, self.watch = self.watch, None
        if watch is not None:
            await watch.stop()
        host = self.host
        if host is None:
            return
        await host.stop(reason="drain")  # renews until every voluntary release is done (FL-65)

    async def stop(self, ctx: NodeContext) -> None:
        """Close the release subscription, the providers, the cooldowns and every MCP child."""
        sub = self.released_sub
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        for task in self.retired:
            task.cancel()
        provs = self.providers
        if provs is not None:
            await provs.aclose()
        benches = self._board
        if benches is not None:
            await benches.stop()
        await self.pool.close()  # no child outlives the node's seats role


def service(ctx: NodeContext) -> RoleService:
    """Build the seats role for ``ctx`` (:class:`SeatsRole`'s hooks)."""
    role = SeatsRole(ctx)
    return RoleService(
        name="seats",
        start=role.start,
        drain=role.drain,
        stop=role.stop,
        prepare=role.prepare,
        apply=role.apply,
        on_posture=role.on_posture,
    )
