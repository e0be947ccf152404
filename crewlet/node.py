"""The node runner: one OS process, the chosen roles mounted into one FastAPI app on one loop (FL-1).

Boot order (FL-129: the listener comes up before anything is claimed):

1. the HTTP listener starts (probes answer; ``/ready`` is 503 ``unconfigured``);
2. the broker: the embedded child nats-server is spawned, or the external cluster dialled (FL-2..FL-4);
3. the coordination buckets are created or adopted (FL-35), or the in-process store for ``local``;
   the object store is opened and the ``objects`` slot claimed (a node configured with another
   store than the one recorded refuses to boot, naming both: ES-71);
4. the presence lease ``node:{id}`` is claimed (FL-42); the bus streams are provisioned;
5. the control plane settles what the fleet runs (FL-109: the fleet's activation pointer; with none,
   what this node served before, else its ``--company`` seed) and applies it once
   (:mod:`crewlet.apply`: mailboxes, providers, the org);
6. each role's start work runs, ``data → ingress → seats → workers``; then ``/ready`` is 200 and
   the reconciler polls (with the ``revision_activated`` nudge) for later activations.

The first SIGTERM/SIGINT drains (FL-129, CO-29), in this order:

1. from the first moment, ``/ready`` answers 503 ``draining`` and every write (POST, PUT, PATCH,
   DELETE) on an ingress node answers 503 ``draining`` with ``Retry-After`` (:class:`_DrainGate`);
   reads go on being served;
2. the roles but ``data`` drain and stop in reverse boot order (``workers``, ``seats``,
   ``ingress``): duties are given back, each running turn finishes and every delivery still in
   hand is returned to its mailbox (a NAK the next holder or incarnation takes at once);
3. presence is released (FL-47) and the listener closes, after the requests in hand are answered;
4. the ``data`` role drains and stops last, so reads (and the in-flight turns' own estate calls)
   are served until the listener has closed;
5. OTLP is flushed, the broker link is closed and an embedded child stopped; exit 0.

A second signal exits at once (FL-130). The embedded broker dying is fatal (FL-4): the node exits
1 so its supervisor restarts it. Every 503 the API sends carries ``Retry-After`` (issue 17): a
route that names none gets :data:`RETRY_AFTER_SECONDS`.

Exit codes: 0 after a drain; 1 when a dependency failed (broker unreachable, child died);
2 when the configuration or the broker refused this node (a usage error that a retry won't fix);
130/143 on a second signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import importlib
import os
import shutil
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared import (
    broker,
    budgets,
    control,
    coordination,
    history,
    leases,
    logs,
    objects,
    records,
    router,
    telemetry,
)
from shared.bus import Bus
from shared.config import ALL_ROLES, NodeConfig
from shared.errors import CrewletError, UsageError
from shared.runtime import (
    PROTOCOL_VERSION,
    NodeContext,
    RoleService,
    Watchdog,
    install_error_handlers,
    probes_router,
)
from shared.secrets import Keyring, SecretStore

from ._fleet_metrics import FleetCollector
from .apply import NodeApplier
from .custody import close_custody, emit_event, open_custody, turn_event

__all__ = ["build_app", "run_node", "seed_revision"]

_log = logs.get("node")
ROLE_ORDER = ("data", "ingress", "seats", "workers")
RETRY_AFTER_SECONDS = 5
"""The ``Retry-After`` (seconds) of a 503 whose route named none, and of a write refused ``draining``."""
_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class _DrainGate:
    """The node's outermost HTTP layer for drains and 503s (FL-129, issue 17); pure ASGI.

    - While the node drains (``ctx.draining``, set by the first signal), every write method
      (POST, PUT, PATCH, DELETE) answers ``503 {"error": "draining", "detail": ...}`` with
      ``Retry-After`` before any route runs, when ``gate_writes`` (an ingress node: nodes without
      it serve no write route). Reads are not touched: they are served until the listener closes.
    - Every 503 response leaving the app carries ``Retry-After``: one the route set is kept, else
      :data:`RETRY_AFTER_SECONDS` is added. So a client can always tell "try again" (503) from
      "do not" whatever route or layer refused.
    """

    def __init__(self, app: ASGIApp, *, ctx: NodeContext, gate_writes: bool) -> None:
        self.app = app
        self.ctx = ctx
        self.gate_writes = gate_writes
        self._retry = str(RETRY_AFTER_SECONDS).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.gate_writes and self.ctx.draining and scope.get("method") in _WRITE_METHODS:
            refusal = JSONResponse(
                {"error": "draining", "detail": "this node is draining; retry on another node"},
                status_code=503,
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
            await refusal(scope, receive, send)
            return

        async def send_with_retry_after(message: Message) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 503:
                headers = list(message.get("headers") or [])
                if not any(k.lower() == b"retry-after" for k, _ in headers):
                    message = {**message, "headers": [*headers, (b"retry-after", self._retry)]}
            await send(message)

        await self.app(scope, receive, send_with_retry_after)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the node decides what a signal means (FL-129)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class StoreInUse(UsageError):
    """Another live process holds this node's ``store.dir`` (its lock file)."""


def _lock_store(store_dir: Path) -> Any:
    """Take this node's exclusive lock on ``store.dir`` before anything touches it.

    A second process on the same directory would start a second broker on the live JetStream
    store and rewrite its files; it is refused here, naming the directory.

    Returns:
        The open lock file (held for the life of the process).

    Raises:
        StoreInUse: another process holds the lock.
        UsageError: the directory cannot be created (e.g. a file is in the way).
    """
    try:
        store_dir.mkdir(parents=True, exist_ok=True)
        handle = open(store_dir / ".lock", "a+")  # noqa: SIM115 - held until the process exits
    except OSError as e:
        raise UsageError(f"store.dir {store_dir}: {e.strerror or e}") from None
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise StoreInUse(
            f"store.dir {store_dir} is in use by {holder}: stop that node, or give this one another "
            "--data-dir / store.dir"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}\n")
    handle.flush()
    return handle


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def load_roles(ctx: NodeContext) -> list[RoleService]:
    """Import and build the role services of ``ctx``'s role set, in boot order."""
    out = []
    for name in ROLE_ORDER:
        if name in ctx.cfg.roles:
            module = importlib.import_module(f"services.{name}")
            out.append(module.service(ctx))
    return out


def build_app(ctx: NodeContext, roles: list[RoleService]) -> FastAPI:
    """Mount the probes and ``/metrics`` on every node and the roles' routers (only ``ingress`` has
    API routes, FL-16)."""
    app = FastAPI(title=f"crewlet node {ctx.node_id}", version="0.1.0")
    install_error_handlers(app, tokens=tuple(t.token for t in ctx.cfg.api.auth.tokens))
    app.include_router(probes_router(ctx))
    for role in roles:
        if role.router is not None:
            app.include_router(role.router)
    _mount_metrics(app, ctx)
    app.add_middleware(_DrainGate, ctx=ctx, gate_writes="ingress" in ctx.cfg.roles)
    app.state.ctx = ctx
    return app


def _mount_metrics(app: FastAPI, ctx: NodeContext) -> None:
    """Serve ``GET /metrics`` (Prometheus text, no token) on every node, beside the probes.

    Choice (issue 15 asks Prometheus to scrape every node): a node without ``ingress`` serves its
    probes and ``/metrics`` and nothing else of the API (FL-16 otherwise). Without this, the turns,
    tokens, alarms and apply lag of seats-only nodes (a satellite, the ``split`` profile's
    ``worker-1``) would reach no dashboard. Series: the turn counters, the process registry (alarm
    gauges, estate storage), and the fleet as this node sees it (:class:`~crewlet._fleet_metrics.FleetCollector`,
    read at scrape time, cached 1 s).
    """
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
    from starlette.responses import Response

    turn_registry = telemetry.default_metrics().registry
    telemetry.webhook_counter()  # registered before the first scrape
    telemetry.init_alarm_series()  # ES-92/FL-154: every alarm kind has a series from the start
    fleet = FleetCollector(ctx)
    fleet_registry = CollectorRegistry(auto_describe=True)
    fleet_registry.register(fleet)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        await fleet.refresh()
        body = generate_latest(turn_registry)
        if turn_registry is not REGISTRY:  # the alarm gauges and process metrics live there
            body += generate_latest(REGISTRY)
        body += generate_latest(fleet_registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)


async def _open_coordination(ctx: NodeContext) -> coordination.Coordination:
    cfg = ctx.cfg
    ttl = timedelta(seconds=cfg.coordination.lease_ttl_seconds)
    if cfg.coordination.type == "local":
        _log.info("seat_placement_is_process_local")
        return coordination.MemoryCoordination(lease_ttl=ttl)
    assert ctx.link is not None
    return await coordination.provision(
        ctx.link.js, prefix=cfg.coordination.bucket_prefix, replicas=cfg.stream.replicas, lease_ttl=ttl
    )


async def _open_objects(ctx: NodeContext) -> objects.ObjectStore:
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


async def _open_bus(ctx: NodeContext) -> Bus:
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


async def _watch_fleet(ctx: NodeContext, *, interval: float = 5.0) -> None:
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


def _presence_meta(ctx: NodeContext) -> dict[str, Any]:
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


def seed_revision(company: Any) -> control.Revision:
    """The revision a node's ``--company`` file seeds (CO-4, FL-109): content-derived id, source ``seed``."""
    document = company.model_dump(mode="json", exclude_unset=True)
    return control.Revision(
        revision_id=control.seed_revision_id(document),
        document=document,
        summary="seeded from the node's --company file",
        source="seed",
        created_by="not recorded",
        created_by_kind="system",
    )


def _forced_revision(company: Any, node_id: str) -> control.Revision:
    document = company.model_dump(mode="json", exclude_unset=True)
    return control.Revision(
        revision_id=control.new_revision_id(),
        document=document,
        summary="imported by --import-company",
        source="import",
        created_by=node_id,
        created_by_kind="operator",
    )


async def _open_control(ctx: NodeContext, roles: list[RoleService], presence: Any) -> control.Reconciler:
    """Build this node's reconciler (FL-106..FL-116) with the node's apply, posture and event hooks."""
    assert ctx.coord is not None
    cfg = ctx.cfg
    store = control.ControlStore(ctx.coord, ctx.extras["keyring"])

    async def on_posture(new: str, old: str) -> None:
        ctx.extras["posture"] = new
        ctx.extras["config_error"] = reconciler.error
        ctx.extras["config_target_epoch"] = reconciler.target
        for role in roles:
            if role.on_posture is not None:
                await role.on_posture(ctx, new)
        if presence is not None and presence.held:  # peers stop counting a shedding node now
            with contextlib.suppress(coordination.CoordinationUnavailable):
                await presence.renew()

    def on_event(data: dict[str, Any]) -> None:
        ctx.extras["config_error"] = reconciler.error
        emit_event(  # its own log on a data node, custody elsewhere (ES-77, ES-78)
            ctx,
            {
                "event_time": int(time.time() * 1_000_000),
                "event_id": str(uuid.uuid4()),
                "event_type": "config_revision_applied",
                "source": ctx.node_id,
                "category": "config",
                "data": data,
            },
        )

    reconciler = control.Reconciler(
        store,
        ctx.coord,
        node_id=ctx.node_id,
        apply=NodeApplier(ctx, roles),
        interval=coordination.reconcile_interval(
            timedelta(seconds=cfg.coordination.lease_ttl_seconds)
        ).total_seconds(),
        on_posture=on_posture,
        on_event=on_event,
        local=None if cfg.store.scratch else control.LocalRecord(cfg.store_dir),
    )
    ctx.extras["control"] = reconciler
    return reconciler


async def _subscribe_nudge(ctx: NodeContext, reconciler: control.Reconciler) -> Any:
    """Subscribe to the activation broadcast (FL-108); a failure is logged, never fatal.

    ``CREWLET_CONFIG_NUDGE=off`` leaves the subscription out (the poll alone converges, within one
    jittered interval): for diagnosing the poll path.
    """
    if os.environ.get("CREWLET_CONFIG_NUDGE", "").lower() in ("off", "0", "false"):
        _log.warning("config_nudge_disabled", detail="CREWLET_CONFIG_NUDGE=off: the poll alone applies")
        return None
    if ctx.link is None:
        return None

    async def on_nudge(msg: Any) -> None:
        reconciler.nudge()

    try:
        return await ctx.link.nc.subscribe(control.REVISION_ACTIVATED_SUBJECT, cb=on_nudge)
    except Exception as e:  # noqa: BLE001 - FL-108: logged, not fatal
        _log.warning("config_nudge_subscribe_failed", error=f"{type(e).__name__}: {e}")
        return None


async def _open_history(ctx: NodeContext) -> history.HistoryResponder | None:
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


async def _open_membership(ctx: NodeContext) -> broker.Membership | None:
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


DRAIN_REPORT_EVERY = 10.0
"""Seconds between two ``drain_in_progress`` lines while a drain runs (FL-129)."""


async def _report_drain(ctx: NodeContext, every: float = DRAIN_REPORT_EVERY) -> None:
    """Log ``drain_in_progress`` (turns in flight, seats still held, seconds since the drain began)
    every ``every`` seconds until cancelled at the end of the drain (FL-129)."""
    began = time.monotonic()
    while True:
        await asyncio.sleep(every)
        _log.info(
            "drain_in_progress",
            in_flight=ctx.in_flight,
            seats_held=len(ctx.seats_held),
            seconds=round(time.monotonic() - began, 1),
        )


async def _wind_down(roles: list[RoleService], ctx: NodeContext) -> None:
    """Drain every role of ``roles``, then stop each, in the order given (FL-129).

    A failing drain or stop is logged (``role_drain_failed``, ``role_stop_failed``) and never skips
    the rest.
    """
    for role in roles:
        try:
            await role.drain(ctx)
        except Exception as e:  # noqa: BLE001 - a failing drain must not skip the rest
            _log.error("role_drain_failed", role=role.name, error=f"{type(e).__name__}: {e}")
    for role in roles:
        try:
            await role.stop(ctx)
        except Exception as e:  # noqa: BLE001
            _log.error("role_stop_failed", role=role.name, error=f"{type(e).__name__}: {e}")


async def run_node(
    cfg: NodeConfig, company: Any = None, *, company_dir: str = ".", import_company: Any = None
) -> int:
    """Run one node until it is drained; return the process exit code.

    Args:
        cfg: The validated node file.
        company: The ``--company`` document, a seed (CO-4, FL-109): published only when the fleet
            has no activation pointer and this node no record of what it served; else ignored
            with ``company_seed_ignored``. None: run what the fleet runs (or unconfigured).
        company_dir: The company file's directory (offline-provider scripts are relative to it).
        import_company: ``--import-company``: a document activated at boot whatever the fleet runs.

    Returns:
        The exit code (see the module docstring).
    """
    try:
        store_lock = _lock_store(cfg.store_dir)
    except CrewletError as e:
        _log.error("node_boot_failed", error=str(e), error_type=type(e).__name__)
        return 2
    if cfg.store.scratch:  # FL-17: a node without data keeps nothing (the lock file stays)
        for child in cfg.store_dir.iterdir():
            if child.name != ".lock":
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        # FL-145: offline commands pointed at this directory refuse it, naming store.scratch
        (cfg.store_dir / ".scratch").write_text("store.scratch: true (wiped at every boot)\n")
    ctx = NodeContext(cfg)
    ctx.extras["store_lock"] = store_lock
    ctx.extras["company_dir"] = company_dir
    tel = telemetry.setup_tracing(
        service_name=telemetry.service_name_for(cfg.roles),
        node_id=cfg.node_id,
        company=getattr(company, "name", "") if company is not None else "",
        otlp_endpoint=cfg.telemetry.otlp_endpoint,
    )
    ctx.extras["telemetry_shutdown"] = tel.shutdown  # flushed after the drain (FL-6)
    roles = load_roles(ctx)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals_seen = 0

    def on_signal(sig: signal.Signals) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen == 1:
            _log.info("drain_requested", signal=sig.name)
            ctx.draining = True
            stop.set()
        else:  # FL-130: a second signal exits at once; unacked work is redelivered by the broker
            _log.warning("drain_aborted", signal=sig.name)
            os._exit(128 + int(sig))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)

    server: _Server | None = None
    serve_task: asyncio.Task[None] | None = None
    if cfg.api.port and not _port_free(cfg.api.host, cfg.api.port):
        _log.error(
            "node_boot_failed",
            error=f"api.port {cfg.api.port} on {cfg.api.host} is already in use: stop "
            "what listens there, or choose another port (--port / api.port)",
        )
        return 2
    if cfg.api.port:
        app = build_app(ctx, roles)
        server = _Server(
            uvicorn.Config(
                app,
                host=cfg.api.host,
                port=cfg.api.port,
                log_level="warning",
                access_log=False,
                lifespan="off",
            )
        )
        serve_task = asyncio.create_task(server.serve(), name="http")
        while not server.started:
            if serve_task.done():
                _log.error("api_listen_failed", host=cfg.api.host, port=cfg.api.port)
                return 2
            await asyncio.sleep(0.01)
        event = "api_listening" if "ingress" in cfg.roles else "api_probes_listening"
        _log.info(event, host=cfg.api.host, port=cfg.api.port)

    watchdog = Watchdog(cfg.coordination.lease_ttl_seconds)
    watchdog.start()
    ctx.extras["watchdog_lag"] = watchdog.worst_lag
    presence: leases.Presence | None = None
    watch_task: asyncio.Task[None] | None = None
    reconciler: control.Reconciler | None = None
    nudge_sub: Any = None
    scatter: history.HistoryResponder | None = None
    membership: broker.Membership | None = None
    started: list[RoleService] = []
    code = 0
    try:
        if not stop.is_set():
            ctx.extras["keyring"] = Keyring.for_node(cfg)  # CO-40: a fleet node without keys refuses (exit 2)
            ctx.link = await broker.open_broker(cfg)
            ctx.coord = await _open_coordination(ctx)
            ctx.extras["secret_store"] = SecretStore(ctx.coord, ctx.extras["keyring"])  # FL-151
            gauge = ctx.extras["budgets"] = budgets.Budgets(ctx.coord, lambda: ctx.org)  # CO-37, FL-119
            gauge.start()  # FL-120: every node reports budget_reported every 15 s
            router.open_router(ctx)  # every node reaches the estate through it (ES-32)
            ctx.objects = await _open_objects(ctx)  # ES-70..ES-73; another recorded store refuses the boot
            presence = leases.Presence(
                ctx.coord,
                node_id=ctx.node_id,
                owner=ctx.owner,
                protocol=PROTOCOL_VERSION,
                ttl=timedelta(seconds=cfg.coordination.lease_ttl_seconds),
                meta=lambda: _presence_meta(ctx),
            )
            await presence.start()
            store = records.TurnStore(cfg.store_dir / "node.db", node=ctx.node_id)
            store.on_finished = lambda result: emit_event(ctx, turn_event(ctx.node_id, result))  # ES-78
            ctx.extras["turns"] = store
            scatter = await _open_history(ctx)  # ES-79: this node's share of fleet history reads
            membership = await _open_membership(ctx)  # FL-148: members answer for the group
            await _open_bus(ctx)
            open_custody(ctx)  # ES-78: a node without data hands its events to a data node
            reconciler = await _open_control(ctx, roles, presence)
            await reconciler.boot(  # FL-109: what the fleet runs, applied once before the roles start
                seed=seed_revision(company) if company is not None else None,
                force=_forced_revision(import_company, ctx.node_id) if import_company is not None else None,
            )
            for role in roles:
                if stop.is_set():
                    break
                await role.start(ctx)
                started.append(role)
            ctx.boot_done = True
            nudge_sub = await _subscribe_nudge(ctx, reconciler)
            reconciler.start()
            watch_task = asyncio.create_task(_watch_fleet(ctx), name="fleet-role-watch")
            _log.info(
                "node_ready",
                roles=ctx.roles,
                broker=cfg.broker_kind,
                owner=ctx.owner,
                unmanned=[r for r in ALL_ROLES if r not in cfg.roles],
            )
        waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(stop.wait())]
        if ctx.link is not None and ctx.link.embedded is not None:
            waiters.append(asyncio.ensure_future(ctx.link.embedded.wait_exit()))
        if serve_task is not None:
            waiters.append(serve_task)
        done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for w in waiters:
            if w is not serve_task and not w.done():
                w.cancel()
        if not stop.is_set():
            code = 1
            if ctx.link is not None and ctx.link.embedded is not None and not ctx.link.embedded.running:
                _log.error("embedded_broker_exited", detail="the child nats-server died; the node stops")
            else:
                _log.error("api_server_stopped")
    except CrewletError as e:
        code = 1 if e.retryable else 2
        _log.error("node_boot_failed", error=str(e), error_type=type(e).__name__)
    ctx.draining = True
    progress = asyncio.create_task(_report_drain(ctx), name="drain-progress")
    if presence is not None and presence.held:
        # Say "draining" on the presence row now, not at the next heartbeat: peers stop counting
        # this node in their fair shares and claim each seat it releases as it goes idle, within
        # a sweep (FL-129). Counted, its share would keep the peers full and every released seat
        # unowned until the longest running turn ended and presence was released (FL-47).
        with contextlib.suppress(coordination.CoordinationUnavailable):
            await presence.renew()
    if watch_task is not None:
        watch_task.cancel()
    if reconciler is not None:  # no apply starts mid-drain
        await reconciler.stop()
    if nudge_sub is not None:
        with contextlib.suppress(Exception):
            await nudge_sub.unsubscribe()
    await watchdog.stop()  # FL-101: disarmed first; teardown may legitimately block
    # FL-129, issue 17: the data role goes last, after the listener closed, so reads (and the
    # running turns' own estate calls) are served for the whole drain
    last = [r for r in started if r.name == "data"]
    await _wind_down([r for r in reversed(started) if r not in last], ctx)
    if presence is not None:
        await presence.release()
    if server is not None and serve_task is not None:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(serve_task, 10.0)
    await _wind_down(last, ctx)
    progress.cancel()
    flush = ctx.extras.get("telemetry_shutdown")
    if callable(flush):
        with contextlib.suppress(Exception):
            flush()
    if scatter is not None:
        await scatter.stop()
    if membership is not None:
        await membership.stop()
    await close_custody(ctx)
    reporter = ctx.extras.get("budgets")
    if isinstance(reporter, budgets.Budgets):
        await reporter.stop()
    if ctx.coord is not None:
        await ctx.coord.close()
    turns = ctx.extras.get("turns")
    if isinstance(turns, records.TurnStore):
        turns.close()
    if ctx.objects is not None:  # before the link: the nats store rides it
        await ctx.objects.close()
    if ctx.link is not None:
        await ctx.link.close()
    ctx.drained.set()
    _log.info("node_stopped", exit_code=code)
    return code
