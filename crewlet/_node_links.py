"""A node's links to the fleet, opened at boot (FL-2..FL-5, FL-35, FL-42, FL-76, FL-148, ES-79).

Boot steps 2 to 4 of :mod:`crewlet.node` call these: the coordination buckets, the object store and its
slot, the bus streams, the presence row's contents, the history scatter responder, the usage days' publisher
(ES-69) and the broker-group membership, plus the fleet role watch every node runs. Each takes the node's context and returns what
it opened; a failure the node survives is logged here, never raised.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from typing import Any

from services.reflect import Auxiliary, ReflectDispatcher
from shared import broker, coordination, history, leases, logs, objects, records
from shared.bus import Bus
from shared.estate.domains.usage import TICK, UsagePublisher
from shared.estate.log import StateLog
from shared.memory import MemoryWriter, Outbox, RoutedMemory
from shared.router import router_of
from shared.runtime import NodeContext
from shared.telemetry import default_metrics

from .custody import emit_event

__all__ = [
    "open_bus",
    "open_coordination",
    "open_history",
    "open_membership",
    "open_objects",
    "open_usage",
    "open_reflect",
    "presence_meta",
    "watch_fleet",
]

_log = logs.get("node")


async def open_coordination(ctx: NodeContext) -> coordination.Coordination:
    cfg = ctx.cfg
    ttl = timedelta(seconds=cfg.coordination.lease_ttl_seconds)
    if cfg.coordination.type == "local":
        _log.info("seat_placement_is_process_local")
        return coordination.MemoryCoordination(lease_ttl=ttl)
    assert ctx.link is not None
    return await coordination.provision(
        ctx.link.js, prefix=cfg.coordination.bucket_prefix, replicas=cfg.stream.replicas, lease_ttl=ttl
    )


async def open_objects(ctx: NodeContext) -> objects.ObjectStore:
    """Open the object store and claim the ``objects`` slot (ES-70..ES-73, ES-71/FL-5).

    A node configured with another store than the one recorded refuses to boot, naming both
    (:class:`~shared.objects.ObjectStoreMismatch`, not retried). "Unknown" answers while a freshly
    created bucket elects its leader (several nodes booting at once) are retried inside the
    provisioning budget (FL-28: 30 s solo, 2 min clustered).
    """
    cfg = ctx.cfg
    assert ctx.coord is not None
    budget = 120.0 if (cfg.clustered or cfg.stream.replicas > 1) else 30.0
    deadline = asyncio.get_running_loop().time() + budget
    store: objects.ObjectStore | None = None
    while True:
        try:
            if store is None:
                store = await objects.open_object_store(cfg, ctx.link)
            await objects.claim_objects_slot(ctx.coord, store)
            return store
        except (objects.ObjectStoreUnavailable, coordination.CoordinationUnavailable) as e:
            if asyncio.get_running_loop().time() > deadline:
                if store is not None:
                    await store.close()
                raise
            _log.info("objects_store_retry", error=str(e))
            await asyncio.sleep(0.5)


async def open_bus(ctx: NodeContext) -> Bus:
    """Provision the bus streams, on every node (FL-76).

    Every agent seat's mailbox is created by each apply, before the swap that lets anything
    publish to it or claim it, whatever this node's roles (FL-78, :mod:`crewlet.apply`). Acks are
    fenced by the seat host once the seats role has one (``ctx.extras["seat_fence"]``); a node
    that holds no seat acks nothing.
    """
    assert ctx.link is not None
    holder: dict[str, Any] = {"fence": None}
    ctx.extras["seat_fence"] = holder

    def fence(handle: str, epoch: int) -> bool:
        f = holder["fence"]
        return bool(f(handle, epoch)) if f is not None else False

    bus = Bus(
        ctx.link.nc,
        ctx.link.js,
        fence=fence,
        ack_wait=timedelta(seconds=ctx.cfg.stream.ack_wait_seconds),
        max_deliver=ctx.cfg.stream.max_deliver,
    )
    await bus.provision(replicas=ctx.cfg.stream.replicas)
    ctx.extras["bus"] = bus
    return bus


async def watch_fleet(ctx: NodeContext, *, interval: float = 5.0) -> None:
    """Every sweep, check the assembled fleet against live presence (FL-20), on every node."""
    watch = leases.RoleWatch()
    while True:
        await asyncio.sleep(interval)
        if ctx.coord is None:
            continue
        try:
            watch.check(await leases.fleet_view(ctx.coord))
        except coordination.CoordinationUnavailable as e:
            _log.warning("fleet_view_unknown", error=str(e))


def presence_meta(ctx: NodeContext) -> dict[str, Any]:
    return {
        "roles": ctx.roles,
        "labels": dict(ctx.cfg.node.labels),
        "broker": ctx.cfg.broker_kind,
        "posture": ctx.posture,
        "draining": ctx.draining,  # peers stop counting a draining node in their shares (FL-129)
        "unserviceable": bool(ctx.extras.get("unserviceable")),  # peers drop it from shares (FL-63)
        "applied_epoch": ctx.extras.get("applied_epoch", 0),
        "seats_held": len(ctx.seats_held),
        "in_flight": ctx.in_flight,
        "api": f"http://{ctx.cfg.api.host}:{ctx.cfg.api.port}" if ctx.cfg.api.port else "",
        "mcp": _mcp_rows(ctx),  # FL-46: one row per MCP server, started/failed and one reason
    }


def _mcp_rows(ctx: NodeContext) -> list[dict[str, Any]]:
    rows = ctx.extras.get("mcp_rows")
    if rows is None:
        return []
    try:
        return list(rows())
    except Exception as e:  # noqa: BLE001 - a broken status source says nothing, never stops the renew
        _log.warning("mcp_rows_failed", error=f"{type(e).__name__}: {e}")
        return []


async def open_history(ctx: NodeContext) -> history.HistoryResponder | None:
    """Answer history scatter reads for this node's turns and (on a data node) events (ES-79)."""
    if ctx.link is None:
        return None

    responder = history.HistoryResponder(  # looked up per read: the data role opens its log later
        ctx.link.nc,
        node_id=ctx.node_id,
        turns=lambda: ctx.extras.get("turns"),
        events=lambda: ctx.extras.get("events"),
    )
    try:
        await responder.start()
    except Exception as e:  # noqa: BLE001 - logged: the node still answers its own ingress
        _log.warning("history_scatter_subscribe_failed", error=f"{type(e).__name__}: {e}")
        return None
    return responder


async def open_membership(ctx: NodeContext) -> broker.Membership | None:
    """Answer broker-group reads and carry removals on ``crewlet.fleet.broker.<id>`` (FL-148).

    Every node gets one (``ctx.extras["broker_membership"]``, which ``GET /fleet/broker`` uses);
    only a member subscribes, whatever its other roles. A failure is logged, never fatal.
    """
    if ctx.link is None:
        return None
    emb = ctx.link.embedded
    m = broker.Membership(
        ctx.link.nc,
        node_id=ctx.node_id,
        kind=ctx.link.kind,
        client_url=emb.url if emb is not None else "",
        monitor_url=emb.monitor_url if emb is not None else "",
    )
    ctx.extras["broker_membership"] = m
    try:
        await m.start()
    except Exception as e:  # noqa: BLE001 - logged: the node still answers its own /fleet/broker
        _log.warning("broker_membership_subscribe_failed", error=f"{type(e).__name__}: {e}")
    return m


def open_memory(ctx: NodeContext) -> MemoryWriter:
    """Open this node's memory writer and its outbox (AG-2), on every node (``ctx.extras["memory"]``).

    The outbox is ``memory-outbox.db`` beside the node's turn records; it is flushed every 30 s and
    once more at the drain (:func:`close_memory`). Only agent seats of the active org have memory.
    """
    assert ctx.link is not None

    def is_agent(handle: str) -> bool:
        org = ctx.org
        seat = org.seat(handle) if org is not None else None
        return seat is not None and seat.kind == "agent"

    writer = MemoryWriter(
        StateLog(ctx.link.js, replicas=ctx.cfg.stream.replicas),
        node_id=ctx.node_id,
        outbox=Outbox(ctx.cfg.store_dir / "memory-outbox.db"),
        is_agent=is_agent,
        metrics=default_metrics(),
    )
    writer.start()
    ctx.extras["memory"] = writer
    return writer


async def close_memory(ctx: NodeContext) -> None:
    """Flush the memory outbox once more and close it (AG-2: flushed on graceful release)."""
    writer = ctx.extras.get("memory")
    if isinstance(writer, MemoryWriter):
        await writer.stop()
        writer.outbox.close()


def open_usage(ctx: NodeContext) -> UsagePublisher | None:
    """Start this node's usage days publisher (ES-69): every node derives its own days from its turn
    records and publishes them to ``CREWLET_USAGE_LOG``; None without a broker link or turn records.

    The tick is 15 s; ``CREWLET_USAGE_TICK_SECONDS`` shortens it (test fleets). The company
    ``timezone`` is read from the applied org at every tick (UTC before one is applied).
    """
    turns = ctx.extras.get("turns")
    if ctx.link is None or not isinstance(turns, records.TurnStore):
        return None
    try:
        tick = float(os.environ.get("CREWLET_USAGE_TICK_SECONDS") or TICK)
    except ValueError:
        tick = TICK
    publisher = UsagePublisher(
        ctx.link.js,
        node_id=ctx.node_id,
        turns=turns.finished_between,
        timezone=lambda: str(ctx.org.company.timezone) if ctx.org is not None else "UTC",
        tick=max(0.2, tick),
    )
    publisher.start()
    return publisher


async def open_reflect(ctx: NodeContext) -> Any:
    """Join the reflect group on this node (AG-6): a :class:`services.reflect.ReflectDispatcher`
    (``ctx.extras["reflect"]``), or None when there is no broker or memory writer, or joining failed
    (logged ``reflect_join_failed``; the node runs on, its turns reflected by the other members)."""
    writer = ctx.extras.get("memory")
    if ctx.link is None or not isinstance(writer, MemoryWriter):
        return None
    budgets = ctx.extras.get("budgets")
    aux = Auxiliary(
        lambda: ctx.extras.get("snapshot"),
        budgets=budgets,
        emit=lambda ev: emit_event(ctx, ev),
        node_id=ctx.node_id,
    )
    dispatcher = ReflectDispatcher(
        ctx.link.js,
        node_id=ctx.node_id,
        org=lambda: ctx.org,
        memory=RoutedMemory(writer, router_of(ctx)),
        aux=aux,
        budgets=budgets,
        emit=lambda ev: emit_event(ctx, ev),
        has_data="data" in ctx.cfg.roles,
    )
    try:
        joined = await dispatcher.start()
    except Exception as e:  # noqa: BLE001 - logged: the other members reflect this node's turns
        _log.warning("reflect_join_failed", error=f"{type(e).__name__}: {e}")
        return None
    if not joined:
        return None
    ctx.extras["reflect"] = dispatcher
    return dispatcher
