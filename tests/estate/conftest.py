"""Fixtures for the estate tests: in-process data nodes on a real nats-server, and node processes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from shared import estate
from shared.coordination import MemoryCoordination
from shared.leases import LeaseRecord, key_of
from shared.router import EstateRouter, RpcServer


@dataclass
class Inproc:
    """One in-process data node: its own connection, estate and RPC server."""

    node_id: str
    nc: Client
    est: estate.Estate
    server: RpcServer
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def svc(self) -> estate.EstateService:
        return self.est.service


async def seed(node: Inproc, *keys: str) -> None:
    """Seed projects and spaces ``keys`` through the log (derived op ids, as the data role does)."""
    for key in keys:
        for op in ("project.upsert", "space.upsert"):
            ans = await node.svc.serve(
                estate.Call(
                    op=op, args={"key": key, "name": key}, op_id=estate.derive_op_id(f"seed-{op}-{key}", key)
                )
            )
            assert ans.status == "ran" and ans.error is None, ans


@pytest.fixture
async def inproc(tmp_path: Path, nats_server: Any) -> AsyncIterator[Callable[..., Awaitable[Inproc]]]:
    """Start in-process data nodes on the test's nats-server; all are closed at the end."""
    started: list[Inproc] = []

    async def start(node_id: str, *, url: str | None = None, **kw: Any) -> Inproc:
        nc = await nats.connect(url or nats_server.url, name=node_id)
        est = await estate.open_estate(
            nc.jetstream(timeout=5.0), node_id=node_id, store_dir=tmp_path / node_id, **kw
        )
        server = RpcServer(nc, node_id=node_id, handler=est.service.serve)
        await server.start()
        node = Inproc(node_id, nc, est, server)
        started.append(node)
        assert await est.wait_level(45)
        return node

    try:
        yield start
    finally:
        for node in started:
            await stop_inproc(node)


async def stop_inproc(node: Inproc) -> None:
    """Stop one in-process node (idempotent)."""
    if node.extra.get("stopped"):
        return
    node.extra["stopped"] = True
    await node.server.stop()
    await node.est.close()
    with contextlib.suppress(Exception):
        await node.nc.close()


async def presence(coord: MemoryCoordination, *nodes: str, roles: tuple[str, ...] = ("data",)) -> None:
    """Write presence leases naming ``nodes`` with ``roles`` (what the router discovers)."""
    for n in nodes:
        rec = LeaseRecord(f"node:{n}", f"{n}:00000000", n, 0, 3, {"roles": list(roles)})
        await coord.put("leases", key_of(f"node:{n}"), rec.encode())


def make_router(
    nc: Client | None, coord: MemoryCoordination, node_id: str, local: Inproc | None = None, **kw: Any
) -> EstateRouter:
    """A router for an asker ``node_id``, optionally with an in-process local copy."""
    return EstateRouter(nc, coord, node_id=node_id, local=(lambda: local.svc) if local else None, **kw)
