"""A company of more than 500 seats boots: the inbox stream allows two consumers per seat beyond
nats-server's default cap of 1 000 per stream (error 10026 without an explicit limit)."""

from __future__ import annotations

from tests.bus.conftest import Broker


async def test_510_seats_get_their_mailboxes(broker: Broker) -> None:
    bus = broker.bus()
    handles = [f"seat-{i}" for i in range(510)]  # 1 020 consumers: just past the default cap
    await bus.ensure_mailboxes(handles)
    info = await broker.js.stream_info("CREWLET_AGENT")
    assert info.state.consumer_count == 1020  # inbox + control per seat
    state = await bus.state("seat-509")
    assert state is not None
