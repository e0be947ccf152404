"""Fixtures for the asks tests (CO-36): a real nats-server with the coordination buckets and the bus
streams provisioned, and a way to read what was published to a seat's inbox."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from nats.aio.client import Client

from shared.broker import connect
from shared.bus import AGENT_STREAM, Bus, Envelope, inbox_subject
from shared.coordination import Coordination, provision


@dataclass
class Kit:
    """One connection to a real nats-server: the coordination store, the bus, and an inbox reader."""

    nc: Client
    coord: Coordination
    bus: Bus

    async def inbox(self, seat: str) -> list[tuple[Envelope, dict[str, str]]]:
        """Every envelope stored on ``seat``'s inbox subject, oldest first, with its headers."""
        js = self.nc.jetstream()
        info = await js.stream_info(AGENT_STREAM)
        out: list[tuple[Envelope, dict[str, str]]] = []
        for seq in range(max(int(info.state.first_seq), 1), int(info.state.last_seq) + 1):
            try:
                msg = await js.get_msg(AGENT_STREAM, seq)
            except Exception as e:  # noqa: BLE001 - nats-py raises NotFoundError for a purged sequence
                if type(e).__name__ == "NotFoundError":
                    continue
                raise
            if msg.subject == inbox_subject(seat):
                assert msg.data is not None
                out.append((Envelope.decode(msg.data), dict(msg.headers or {})))
        return out


@pytest.fixture
async def kit(nats_server: Any) -> AsyncIterator[Kit]:
    """A fresh nats-server with every coordination bucket and the bus streams."""
    nc, _ = await connect(nats_server.url, timeout=10, name="asks")
    try:
        js = nc.jetstream()
        coord = await provision(js, lease_ttl=timedelta(seconds=5))
        bus = Bus(nc, js)
        await bus.provision()
        await bus.ensure_mailboxes(
            ["lead", "dev", "docs", "triage"]
        )  # interest stream: mail needs a consumer
        yield Kit(nc, coord, bus)
        await coord.close()
    finally:
        await nc.close()
