"""The node's HTTP surface: the app it serves, the drain gate in front of it, and the listener (FL-1, FL-129).

Owns :func:`build_app` (probes and ``/metrics`` on every node, the roles' routers), :class:`DrainGate`
(the outermost layer: writes refused ``draining``, ``Retry-After`` on every 503) and :func:`listen`
(boot step 1: the listener is up before anything is claimed). Imported by :mod:`crewlet.node` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared import logs, telemetry
from shared.runtime import NodeContext, RoleService, install_error_handlers, probes_router

from ._fleet_metrics import FleetCollector
from ._offline_docs import mount_offline_docs

__all__ = ["RETRY_AFTER_SECONDS", "DrainGate", "QuietServer", "build_app", "listen", "port_free"]

_log = logs.get("node")
RETRY_AFTER_SECONDS = 5
"""The ``Retry-After`` (seconds) of a 503 whose route named none, and of a write refused ``draining``."""
_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class DrainGate:
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


class QuietServer(uvicorn.Server):
    """uvicorn without its own signal handlers: the node decides what a signal means (FL-129)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def build_app(ctx: NodeContext, roles: list[RoleService]) -> FastAPI:
    """Mount the probes and ``/metrics`` on every node and the roles' routers (only ``ingress`` has
    API routes, FL-16)."""
    app = FastAPI(title=f"crewlet node {ctx.node_id}", version="0.1.0", docs_url=None, redoc_url=None)
    mount_offline_docs(app)  # Swagger UI and ReDoc from the package, no CDN (issue 38)
    install_error_handlers(app, tokens=tuple(t.token for t in ctx.cfg.api.auth.tokens))
    app.include_router(probes_router(ctx))
    for role in roles:
        if role.router is not None:
            app.include_router(role.router)
    mount_metrics(app, ctx)
    app.add_middleware(DrainGate, ctx=ctx, gate_writes="ingress" in ctx.cfg.roles)
    app.state.ctx = ctx
    return app


def mount_metrics(app: FastAPI, ctx: NodeContext) -> None:
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


async def listen(ctx: NodeContext, roles: list[RoleService]) -> tuple[QuietServer, asyncio.Task[None]] | None:
    """Boot step 1 (FL-129): serve the app on ``api.host:api.port`` before anything is claimed.

    Returns:
        The server and its task once it listens; None when the listener did not come up (logged
        ``api_listen_failed``; the node exits 2).
    """
    cfg = ctx.cfg
    app = build_app(ctx, roles)
    server = QuietServer(
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
            return None
        await asyncio.sleep(0.01)
    event = "api_listening" if "ingress" in cfg.roles else "api_probes_listening"
    _log.info(event, host=cfg.api.host, port=cfg.api.port)
    return server, serve_task
