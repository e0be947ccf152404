"""A company of more than 500 seats boots: the inbox stream allows two consumers per seat beyond
nats-server's default cap of 1 000 per stream (error 10026 without an explicit limit)."""

from __future__ import annotations

from tests.bus.conftest import Broker


async def test_600_seats_get_their_mailboxes(broker: Broker) -> None:
    bus = broker.bus()
    handles = [f"seat-{i}" for i in range(600)]
    await bus.ensure_mailboxes(handles)
    info = await broker.js.stream_info("CREWLET_AGENT")
    assert info.state.consumer_count == 1200  # inbox + control per seat
    state = await bus.state("seat-599")
    assert state is not None
