"""Seat leases and mailboxes together, on one real nats-server: the wiring a seats node uses.

Each "node" has its own connection, its own SeatHost (owner incarnation) and its own Bus whose
fence is that host's ``holds``; the acquire hook attaches the mailbox last, the release hook
detaches it (FL-65, FL-66, FL-79).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import structlog

from shared.broker import connect
from shared.bus import Bus, Envelope, Mailbox, MailboxFenced
from shared.coordination import provision
from shared.leases import SeatHost
from shared.runtime import PROTOCOL_VERSION

TTL = timedelta(seconds=2)


class SeatNode:
    """One node's seats role, reduced to what the handover needs."""

    def __init__(self, name: str, nc: Any, host_coord: Any, *, ack_wait: timedelta) -> None:
        self.name = name
        self.nc = nc
        self.boxes: dict[str, Mailbox] = {}
        self.host = SeatHost(
            host_coord,
            node_id=name,
            owner=f"{name}:0000beef",
            protocol=PROTOCOL_VERSION,
            ttl=TTL,
            on_acquire=self.attach,
            on_release=self.detach,
        )
        self.bus = Bus(nc, nc.jetstream(), fence=self.host.holds, ack_wait=ack_wait)

    async def attach(self, handle: str, epoch: int) -> None:
        self.boxes[handle] = await self.bus.attach(handle, epoch)

    async def detach(self, handle: str, reason: str) -> None:
        box = self.boxes.pop(handle, None)
        if box is not None:
            await box.detach()


@pytest.fixture
async def fleet(nats_server: Any) -> AsyncIterator[Any]:
    opened: list[Any] = []

    async def node(name: str, *, ack_wait: timedelta = timedelta(minutes=30)) -> SeatNode:
        nc, _ = await connect(nats_server.url, timeout=10, name=name)
        opened.append(nc)
        coord = await provision(nc.jetstream(), lease_ttl=TTL)
        n = SeatNode(name, nc, coord, ack_wait=ack_wait)
        await n.bus.provision()
        await n.bus.ensure_mailboxes(["triage"])  # every node, before anything publishes (FL-78)
        return n

    try:
        yield node
    finally:
        for nc in opened:
            await nc.close()


async def publish(node: SeatNode, *ns: int) -> None:
    for n in ns:
        await node.bus.publish_to_seat(
            "triage", Envelope.new("task_assigned", source="work", payload={"n": n})
        )


async def test_a_drain_hands_the_unfinished_delivery_to_the_successor(fleet: Any) -> None:
    a, b = await fleet("n1"), await fleet("n2")
    await publish(a, 0, 1)
    epoch_a = await a.host.claim("triage")
    assert epoch_a is not None and a.host.may_start("triage") == epoch_a
    done = await a.boxes["triage"].fetch(timeout=1)
    assert done is not None
    await a.boxes["triage"].ack(done)
    unfinished = await a.boxes["triage"].fetch(timeout=1)
    assert unfinished is not None
    await a.host.release("triage", "drain")  # voluntary: the NAK is allowed, the lease is given up
    epoch_b = await b.host.claim("triage")
    assert epoch_b == epoch_a + 1
    got = await b.boxes["triage"].fetch(timeout=1)
    assert got is not None and got.stream_seq == unfinished.stream_seq and got.num_delivered == 2
    await b.boxes["triage"].ack(got)
    assert await b.boxes["triage"].fetch(timeout=0.3) is None
    await b.host.stop()


async def test_a_zombie_holder_cannot_ack_after_its_lease_lapsed(fleet: Any) -> None:
    """The ack fence follows the lease: once a successor may hold the seat, the old epoch's ack is refused."""
    a = await fleet("n1", ack_wait=timedelta(seconds=1))
    b = await fleet("n2", ack_wait=timedelta(seconds=1))
    await publish(a, 7)
    epoch_a = await a.host.claim("triage")
    assert epoch_a is not None
    box_a = a.boxes["triage"]
    held = await box_a.fetch(timeout=1)
    assert held is not None
    await asyncio.sleep(TTL.total_seconds() + 0.6)  # A is wedged: no renewals; the lease lapses
    epoch_b = await b.host.claim("triage")
    assert epoch_b == epoch_a + 1
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(MailboxFenced):
            await box_a.ack(held)
    assert [e["action"] for e in logs if e["event"] == "inbox_ack_fenced"] == ["ack"]
    assert not a.host.may_continue("triage", epoch_a)
    redelivered = await b.boxes["triage"].fetch(timeout=2.5)  # after the 1 s ack wait
    assert redelivered is not None and redelivered.stream_seq == held.stream_seq
    await b.boxes["triage"].ack(redelivered)
    assert await a.host.renew_all() == {"triage": False}  # A wakes up: lost, fenced release
    assert "triage" not in a.boxes
    await b.host.stop()
