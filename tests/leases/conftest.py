"""Fixtures for the leases tests: a real NATS coordination store with a 2 s lease TTL."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from shared.broker import connect
from shared.coordination import Coordination, provision

TTL = timedelta(seconds=2)


class Clock:
    """A monotonic clock a test moves by hand; starts at the real monotonic time."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
async def kv(nats_server: Any) -> AsyncIterator[Coordination]:
    """Coordination buckets on a real nats-server; the ``leases`` bucket ages keys out after 2 s."""
    nc, _ = await connect(nats_server.url, timeout=10, name="t")
    try:
        yield await provision(nc.jetstream(), lease_ttl=TTL)
    finally:
        await nc.close()


@pytest.fixture
def clock() -> Clock:
    """A hand-moved monotonic clock."""
    return Clock()
