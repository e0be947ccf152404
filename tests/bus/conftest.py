"""Fixtures for the bus tests: a real nats-server with the bus streams provisioned."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from nats.aio.client import Client

from shared.broker import connect
from shared.bus import Bus


class Broker:
    """One connection to a real nats-server; ``bus(**options)`` builds a Bus on it."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.js = nc.jetstream()

    def bus(self, **options: Any) -> Bus:
        return Bus(self.nc, self.js, **options)


@pytest.fixture
async def broker(nats_server: Any) -> AsyncIterator[Broker]:
    """A connection to a fresh nats-server whose bus streams exist."""
    nc, _ = await connect(nats_server.url, timeout=10, name="t")
    try:
        b = Broker(nc)
        await b.bus().provision()
        yield b
    finally:
        await nc.close()


@pytest.fixture
async def second(nats_server: Any) -> AsyncIterator[Callable[[], Any]]:
    """Factory of further connections (another node) to the same server; all closed at the end."""
    opened: list[Client] = []

    async def open_one() -> Broker:
        nc, _ = await connect(nats_server.url, timeout=10, name="t2")
        opened.append(nc)
        return Broker(nc)

    try:
        yield open_one
    finally:
        for nc in opened:
            await nc.close()
