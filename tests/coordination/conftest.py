"""The coordination backend fixture: one suite, run unchanged over both backends (FL-39)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from shared.broker import connect
from shared.coordination import Coordination, MemoryCoordination, provision

CONTRACT_TTL = timedelta(seconds=2)


@pytest.fixture(params=["memory", "nats"])
async def coord(request: Any) -> AsyncIterator[Coordination]:
    """A coordination store whose ``leases`` bucket ages keys out after 2 s: the twin, then NATS."""
    store: Coordination
    if request.param == "memory":
        store = MemoryCoordination(lease_ttl=CONTRACT_TTL)
        yield store
        await store.close()
        return
    server = request.getfixturevalue("nats_server")
    nc, _ = await connect(server.url, timeout=10, name="t")
    try:
        store = await provision(nc.jetstream(), lease_ttl=CONTRACT_TTL)
        yield store
        await store.close()
    finally:
        await nc.close()
