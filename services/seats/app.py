"""The ``seats`` role: claims seat leases, attaches their mailboxes, runs turns (FL-15, CO-7, CO-11).

Start (after ``data`` on the same node, so the estate answers): build the providers and the turn
engine from the applied company, create the seat host (leases with epoch fencing, FL-48..FL-55)
with the dispatcher's hooks, assign every agent seat, start renewing and sweeping. Drain: the seat
host releases every seat voluntarily — each running turn finishes first, its mailbox NAKs what it
fetched and did not finish, then detaches (FL-65, FL-129). Stop: the providers' clients close.

The node runner has already created every seat's mailbox (FL-78) and put the bus in
``ctx.extras["bus"]`` and the turn records in ``ctx.extras["turns"]``.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from pathlib import Path
from typing import Any

from shared import logs, providers, telemetry
from shared.bus import Bus
from shared.leases import ClaimAll, FairShare, PlacementPolicy, SeatHost, Selector
from shared.records import TurnStore
from shared.runtime import PROTOCOL_VERSION, NodeContext, RoleService
from shared.turns import TurnEngine

from .dispatcher import Dispatcher

__all__ = ["RELEASED_SUBJECT", "service"]

RELEASED_SUBJECT = "crewlet.seats.released"
"""Core NATS subject a node publishes on after a voluntary seat release (ours; no payload but the
releasing owner); every seats node sweeps on it."""

_log = logs.get("seat.host")


def _secret_values(company: Any) -> list[str]:
    """Resolved credential values to redact from recorded prompts (api keys, webhook secrets)."""
    out: list[str] = []
    for entry in company.providers.llm.values():
        out += [k for k in entry.api_keys if k]
    out += [w.secret for w in company.integrations.webhooks if w.secret]
    return out


def service(ctx: NodeContext) -> RoleService:
    """Build the seats role for ``ctx``."""
    state: dict[str, Any] = {}

    def engine() -> TurnEngine:
        eng: TurnEngine = state["engine"]
        return eng

    async def start(ctx: NodeContext) -> None:
        if ctx.org is None or ctx.resolved is None or ctx.coord is None:
            _log.warning("seats_idle", reason="no active company")
            return
        bus: Bus = ctx.extras["bus"]
        turns: TurnStore = ctx.extras["turns"]
        base_dir = Path(ctx.extras.get("company_dir", "."))
        provs = providers.build_providers(ctx.resolved, base_dir=base_dir)
        state["providers"] = provs
        state["engine"] = TurnEngine(
            ctx.org,
            provs,
            recorder=turns,
            metrics=telemetry.default_metrics(),
            epoch=int(ctx.extras.get("applied_epoch", 0)),
            capture_content=ctx.cfg.telemetry.capture_content,
            secrets=_secret_values(ctx.resolved),
        )
        dispatcher = Dispatcher(ctx, bus, engine, turns)

        async def announce_release(handle: str, reason: str) -> None:
            # ours: a voluntary release tells the fleet at once, so a successor claims within
            # milliseconds rather than on its next 5 s sweep (its claim budget still applies)
            if ctx.link is not None and not ctx.link.nc.is_closed:
                await ctx.link.nc.publish(RELEASED_SUBJECT, ctx.owner.encode())

        def selectors() -> dict[str, Selector]:
            out: dict[str, Selector] = {}
            for seat in ctx.org.seats if ctx.org is not None else ():
                p = seat.role.placement
                if p is not None:
                    out[seat.handle] = Selector(p.node, tuple(sorted(p.labels.items())))
            return out

        fair: FairShare | None = None
        policy: PlacementPolicy = ClaimAll()
        if ctx.cfg.coordination.type != "local":  # local leases: this node is the whole company
            fair = FairShare(
                ctx.coord,
                node_id=ctx.node_id,
                labels=dict(ctx.cfg.node.labels),
                protocol=PROTOCOL_VERSION,
                selectors=selectors,
            )
            policy = fair
        host = SeatHost(
            ctx.coord,
            node_id=ctx.node_id,
            owner=ctx.owner,
            protocol=PROTOCOL_VERSION,
            ttl=timedelta(seconds=ctx.cfg.coordination.lease_ttl_seconds),
            on_acquire=dispatcher.on_acquire,
            on_release=dispatcher.on_release,
            on_quiesce=dispatcher.on_quiesce,
            on_resume=dispatcher.on_resume,
            policy=policy,
            on_released=announce_release,
        )
        dispatcher.host = host
        bus_fence = ctx.extras.get("seat_fence")
        if isinstance(bus_fence, dict):
            bus_fence["fence"] = host.holds  # the bus asks the seat host before every ack (FL-74)
        state["host"] = host
        state["dispatcher"] = dispatcher
        ctx.extras["seats_health"] = lambda: {**host.health(), **(fair.health() if fair is not None else {})}
        ctx.extras["seat_host"] = host
        host.assign([s.handle for s in ctx.org.seats])
        host.start()
        if ctx.link is not None:

            async def on_released_elsewhere(msg: Any) -> None:
                if msg.data.decode(errors="replace") != ctx.owner:
                    host.nudge()  # a peer freed a seat: sweep now, not on the timer

            state["released_sub"] = await ctx.link.nc.subscribe(RELEASED_SUBJECT, cb=on_released_elsewhere)

    async def drain(ctx: NodeContext) -> None:
        host: SeatHost | None = state.get("host")
        if host is None:
            return
        await host.stop(reason="drain")  # renews until every voluntary release is done (FL-65)

    async def stop(ctx: NodeContext) -> None:
        sub = state.get("released_sub")
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        provs = state.get("providers")
        if provs is not None:
            await provs.aclose()

    return RoleService(name="seats", start=start, drain=drain, stop=stop)
