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
   DELETE) on an ingress node answers 503 ``draining`` with ``Retry-After``
   (:class:`~crewlet._node_http.DrainGate`); reads go on being served;
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

Where each step lives: :class:`NodeRun` below runs them in order, one method per step
(:meth:`NodeRun.listen`, :meth:`~NodeRun.connect`, :meth:`~NodeRun.provision`, :meth:`~NodeRun.settle`,
:meth:`~NodeRun.start_roles`, :meth:`~NodeRun.serve`, :meth:`~NodeRun.drain`). The steps' parts:
:mod:`crewlet._node_store` (the ``store.dir`` lock), :mod:`crewlet._node_http` (the app, the drain gate,
the listener), :mod:`crewlet._node_links` (coordination, objects, bus, presence contents, history,
membership), :mod:`crewlet._node_control` (the reconciler), :mod:`crewlet._node_drain`. Seat leases are
claimed by the seats role (:mod:`services.seats.app`, through :mod:`shared.leases`), not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import signal
from datetime import timedelta
from typing import Any

from shared import broker, budgets, control, coordination, history, leases, logs, records, router, telemetry
from shared.config import ALL_ROLES, NodeConfig
from shared.errors import CrewletError
from shared.runtime import PROTOCOL_VERSION, NodeContext, RoleService, Watchdog
from shared.secrets import Keyring, SecretStore

from ._node_control import forced_revision, open_control, seed_revision, subscribe_nudge
from ._node_drain import report_drain, wind_down
from ._node_http import QuietServer, build_app, listen, port_free
from ._node_links import (
    close_memory,
    open_bus,
    open_coordination,
    open_history,
    open_membership,
    open_memory,
    open_objects,
    open_reflect,
    open_usage,
    presence_meta,
    watch_fleet,
)
from ._node_store import lock_store, wipe_scratch
from .custody import close_custody, emit_event, open_custody, publish_completed, turn_event

__all__ = ["NodeRun", "build_app", "load_roles", "run_node", "seed_revision"]

_log = logs.get("node")
ROLE_ORDER = ("data", "ingress", "seats", "workers")


def load_roles(ctx: NodeContext) -> list[RoleService]:
    """Import and build the role services of ``ctx``'s role set, in boot order."""
    out = []
    for name in ROLE_ORDER:
        if name in ctx.cfg.roles:
            module = importlib.import_module(f"services.{name}")
            out.append(module.service(ctx))
    return out


class NodeRun:
    """One node process's life, one method per boot step, then the wait and the drain (FL-129).

    Built once the ``store.dir`` lock is held; :func:`run_node` calls the steps in order. What each
    step opened is kept here so the drain closes exactly what was opened.
    """

    def __init__(self, cfg: NodeConfig, store_lock: Any, *, company: Any, company_dir: str) -> None:
        self.cfg = cfg
        self.ctx = NodeContext(cfg)
        self.ctx.extras["store_lock"] = store_lock
        self.ctx.extras["company_dir"] = company_dir
        tel = telemetry.setup_tracing(
            service_name=telemetry.service_name_for(cfg.roles),
            node_id=cfg.node_id,
            company=getattr(company, "name", "") if company is not None else "",
            otlp_endpoint=cfg.telemetry.otlp_endpoint,
        )
        self.ctx.extras["telemetry_shutdown"] = tel.shutdown  # flushed after the drain (FL-6)
        self.roles = load_roles(self.ctx)
        self.stop = asyncio.Event()
        self.signals_seen = 0
        self.server: QuietServer | None = None
        self.serve_task: asyncio.Task[None] | None = None
        self.watchdog = Watchdog(cfg.coordination.lease_ttl_seconds)
        self.presence: leases.Presence | None = None
        self.watch_task: asyncio.Task[None] | None = None
        self.reconciler: control.Reconciler | None = None
        self.nudge_sub: Any = None
        self.scatter: history.HistoryResponder | None = None
        self.membership: broker.Membership | None = None
        self.usage: Any = None
        self.started: list[RoleService] = []
        self.reflect: Any = None

    def install_signals(self) -> None:
        """SIGTERM/SIGINT: the first drains, a second exits at once (FL-129, FL-130)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.on_signal, sig)

    def on_signal(self, sig: signal.Signals) -> None:
        """Count a signal: the first sets ``draining`` and wakes :meth:`serve`, a second ``os._exit``s."""
        self.signals_seen += 1
        if self.signals_seen == 1:
            _log.info("drain_requested", signal=sig.name)
            self.ctx.draining = True
            self.stop.set()
        else:  # FL-130: a second signal exits at once; unacked work is redelivered by the broker
            _log.warning("drain_aborted", signal=sig.name)
            os._exit(128 + int(sig))

    async def listen(self) -> bool:
        """Boot step 1: the HTTP listener, when ``api.port`` is set; False (exit 2) when it cannot listen."""
        cfg = self.cfg
        if cfg.api.port and not port_free(cfg.api.host, cfg.api.port):
            _log.error(
                "node_boot_failed",
                error=f"api.port {cfg.api.port} on {cfg.api.host} is already in use: stop "
                "what listens there, or choose another port (--port / api.port)",
            )
            return False
        if cfg.api.port:
            up = await listen(self.ctx, self.roles)
            if up is None:
                return False
            self.server, self.serve_task = up
        return True

    async def connect(self) -> None:
        """Boot steps 2-3: keys, the broker, coordination, secrets, budgets, the router, the object store."""
        ctx, cfg = self.ctx, self.cfg
        # the turn records open before anything can answer GET /messages: a turn a killed incarnation
        # left running reads abandoned (queued) from the first answer on, never "running" (CO-8)
        ctx.extras["turns"] = records.TurnStore(cfg.store_dir / "node.db", node=ctx.node_id)
        ctx.extras["keyring"] = Keyring.for_node(cfg)  # CO-40: a fleet node without keys refuses (exit 2)
        ctx.link = await broker.open_broker(cfg)
        ctx.coord = await open_coordination(ctx)
        ctx.extras["secret_store"] = SecretStore(ctx.coord, ctx.extras["keyring"])  # FL-151
        gauge = ctx.extras["budgets"] = budgets.Budgets(ctx.coord, lambda: ctx.org)  # CO-37, FL-119
        gauge.start()  # FL-120: every node reports budget_reported every 15 s
        router.open_router(ctx)  # every node reaches the estate through it (ES-32)
        ctx.objects = await open_objects(ctx)  # ES-70..ES-73; another recorded store refuses the boot

    async def provision(self) -> None:
        """Boot step 4: presence ``node:{id}`` (FL-42), the turn records, history, membership, the bus."""
        ctx, cfg = self.ctx, self.cfg
        assert ctx.coord is not None
        self.presence = leases.Presence(
            ctx.coord,
            node_id=ctx.node_id,
            owner=ctx.owner,
            protocol=PROTOCOL_VERSION,
            ttl=timedelta(seconds=cfg.coordination.lease_ttl_seconds),
            meta=lambda: presence_meta(ctx),
        )
        await self.presence.start()
        store: records.TurnStore = ctx.extras["turns"]  # opened first thing in connect()
        ctx.extras["emit_event"] = lambda ev: emit_event(ctx, ev)  # roles' own events (AG-8 prefetch_summary)
        store.on_finished = lambda result: self.turn_finished(result)  # ES-78, AG-6
        self.usage = open_usage(ctx)  # ES-69: this node's usage days, published every 15 s
        self.scatter = await open_history(ctx)  # ES-79: this node's share of fleet history reads
        self.membership = await open_membership(ctx)  # FL-148: members answer for the group
        await open_bus(ctx)
        open_memory(ctx)  # AG-2: every node may write memory (tools, reflect dispatcher)
        open_custody(ctx)  # ES-78: a node without data hands its events to a data node

    def turn_finished(self, result: Any) -> None:
        """A turn's record is written: its ``turn.finished`` event (ES-78) and, when it settled, its
        ``agent_turn_completed`` for the reflect dispatcher (AG-6)."""
        emit_event(self.ctx, turn_event(self.ctx.node_id, result))
        publish_completed(self.ctx, result)

    async def settle(self, company: Any, import_company: Any) -> control.Reconciler:
        """Boot step 5: settle what the fleet runs and apply it once, before the roles start (FL-109)."""
        ctx = self.ctx
        reconciler = self.reconciler = await open_control(ctx, self.roles, self.presence)
        await reconciler.boot(  # FL-109: what the fleet runs, applied once before the roles start
            seed=seed_revision(company) if company is not None else None,
            force=forced_revision(import_company, ctx.node_id) if import_company is not None else None,
        )
        return reconciler

    async def start_roles(self, reconciler: control.Reconciler) -> None:
        """Boot step 6: each role's start, in boot order; then the nudge, the reconciler, the role watch."""
        ctx, cfg = self.ctx, self.cfg
        for role in self.roles:
            if self.stop.is_set():
                break
            await role.start(ctx)
            self.started.append(role)
        ctx.boot_done = True
        self.reflect = await open_reflect(ctx)  # AG-6: every node joins the reflect group
        self.nudge_sub = await subscribe_nudge(ctx, reconciler)
        reconciler.start()
        self.watch_task = asyncio.create_task(watch_fleet(ctx), name="fleet-role-watch")
        _log.info(
            "node_ready",
            roles=ctx.roles,
            broker=cfg.broker_kind,
            owner=ctx.owner,
            unmanned=[r for r in ALL_ROLES if r not in cfg.roles],
        )

    async def serve(self) -> int:
        """Wait for a signal, the embedded broker's exit or the listener's end; the exit code so far."""
        ctx = self.ctx
        waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(self.stop.wait())]
        if ctx.link is not None and ctx.link.embedded is not None:
            waiters.append(asyncio.ensure_future(ctx.link.embedded.wait_exit()))
        if self.serve_task is not None:
            waiters.append(self.serve_task)
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for w in waiters:
            if w is not self.serve_task and not w.done():
                w.cancel()
        if self.stop.is_set():
            return 0
        if ctx.link is not None and ctx.link.embedded is not None and not ctx.link.embedded.running:
            _log.error("embedded_broker_exited", detail="the child nats-server died; the node stops")
        else:
            _log.error("api_server_stopped")
        return 1

    async def boot_and_serve(self, company: Any, import_company: Any) -> int:
        """Steps 2-6 then :meth:`serve`; a :class:`CrewletError` is exit 1 (retryable) or 2."""
        try:
            if not self.stop.is_set():
                await self.connect()
                await self.provision()
                reconciler = await self.settle(company, import_company)
                await self.start_roles(reconciler)
            return await self.serve()
        except CrewletError as e:
            _log.error("node_boot_failed", error=str(e), error_type=type(e).__name__)
            return 1 if e.retryable else 2

    async def drain(self, code: int) -> int:
        """The drain, in the module docstring's order (FL-129, CO-29); returns ``code``."""
        ctx = self.ctx
        ctx.draining = True
        progress = asyncio.create_task(report_drain(ctx), name="drain-progress")
        await self._quiesce()
        # FL-129, issue 17: the data role goes last, after the listener closed, so reads (and the
        # running turns' own estate calls) are served for the whole drain
        last = [r for r in self.started if r.name == "data"]
        await wind_down([r for r in reversed(self.started) if r not in last], ctx)
        if self.presence is not None:
            await self.presence.release()
        if self.server is not None and self.serve_task is not None:
            self.server.should_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.serve_task, 10.0)
        await wind_down(last, ctx)
        progress.cancel()
        await self._close_links()
        ctx.drained.set()
        _log.info("node_stopped", exit_code=code)
        return code

    async def _quiesce(self) -> None:
        """Drain step 0: say draining on presence now, stop the watch, the reconciler, the nudge, the watchdog."""
        presence = self.presence
        if presence is not None and presence.held:
            # Say "draining" on the presence row now, not at the next heartbeat: peers stop counting
            # this node in their fair shares and claim each seat it releases as it goes idle, within
            # a sweep (FL-129). Counted, its share would keep the peers full and every released seat
            # unowned until the longest running turn ended and presence was released (FL-47).
            with contextlib.suppress(coordination.CoordinationUnavailable):
                await presence.renew()
        if self.watch_task is not None:
            self.watch_task.cancel()
        if self.reconciler is not None:  # no apply starts mid-drain
            await self.reconciler.stop()
        if self.nudge_sub is not None:
            with contextlib.suppress(Exception):
                await self.nudge_sub.unsubscribe()
        await self.watchdog.stop()  # FL-101: disarmed first; teardown may legitimately block
        if self.reflect is not None:  # no new reflect pass; the memory writer flushes later
            await self.reflect.stop()

    async def _close_links(self) -> None:
        """Drain step 5: flush OTLP, then close what boot opened, the broker link last."""
        ctx = self.ctx
        if self.usage is not None:  # ES-69: the drained node's last turns reach every data node
            await self.usage.stop(final=True)
        flush = ctx.extras.get("telemetry_shutdown")
        if callable(flush):
            with contextlib.suppress(Exception):
                flush()
        if self.scatter is not None:
            await self.scatter.stop()
        if self.membership is not None:
            await self.membership.stop()
        await close_custody(ctx)
        await close_memory(ctx)  # AG-2: the outbox is flushed before the link closes
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
        store_lock = lock_store(cfg.store_dir)
    except CrewletError as e:
        _log.error("node_boot_failed", error=str(e), error_type=type(e).__name__)
        return 2
    if cfg.store.scratch:  # FL-17: a node without data keeps nothing (the lock file stays)
        wipe_scratch(cfg.store_dir)
    run = NodeRun(cfg, store_lock, company=company, company_dir=company_dir)
    run.install_signals()
    if not await run.listen():
        return 2
    run.watchdog.start()
    run.ctx.extras["watchdog_lag"] = run.watchdog.worst_lag
    code = await run.boot_and_serve(company, import_company)
    return await run.drain(code)
