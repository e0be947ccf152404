"""Fixtures for the control-plane tests: a real nats-server's coordination buckets and a keyring."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from shared.broker import connect
from shared.coordination import Coordination, provision
from shared.secrets import Keyring


@pytest.fixture
def keyring() -> Keyring:
    """A one-key keyring (fresh 32 random bytes)."""
    return Keyring("k1", {"k1": os.urandom(32)})


@pytest.fixture
async def kv(nats_server: Any) -> AsyncIterator[Coordination]:
    """The coordination buckets on a real nats-server (status ages out after 4 × TTL/3 = 4 s)."""
    nc, _ = await connect(nats_server.url, timeout=10, name="control-test")
    try:
        store = await provision(nc.jetstream(), lease_ttl=timedelta(seconds=3))
        yield store
        await store.close()
    finally:
        await nc.close()
