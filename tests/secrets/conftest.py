"""Secret-store fixtures: one suite over the in-process twin and a real nats-server KV (FL-39)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from shared.broker import connect
from shared.coordination import Coordination, MemoryCoordination, provision
from shared.secrets import Keyring

KEY_OLD = bytes(range(32))
KEY_NEW = bytes(range(100, 132))


def keyring(active: str = "old", **keys: bytes) -> Keyring:
    """A keyring of ``keys`` (default: only ``old``)."""
    return Keyring(active, keys or {"old": KEY_OLD})


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.fixture(params=["memory", "nats"])
async def coord(request: Any) -> AsyncIterator[Coordination]:
    """A coordination store with the ``secrets`` slot: the twin, then a real nats-server KV."""
    store: Coordination
    if request.param == "memory":
        store = MemoryCoordination()
        yield store
        await store.close()
        return
    server = request.getfixturevalue("nats_server")
    nc, _ = await connect(server.url, timeout=10, name="secrets-test")
    try:
        store = await provision(nc.jetstream(), lease_ttl=timedelta(seconds=5))
        yield store
        await store.close()
    finally:
        await nc.close()
