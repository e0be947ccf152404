"""CO-41's bound: at most six comment wakes per seat and item per hour, fleet-wide, on the
coordination KV (the ``wakes`` slot, whose bucket age is the hour: FL-34), over both backends; an
unknown answer fails open (FL-32: unknown is never read as "no")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import structlog
from nats.aio.client import Client

from shared import tools
from shared.broker import connect
from shared.bus import Bus, inbox_subject
from shared.coordination import (
    Coordination,
    CoordinationUnavailable,
    FaultyCoordination,
    MemoryCoordination,
    provision,
)

ITEM = {"key": "ENG-1", "assignee": "lead", "watchers": []}
AGENTS = {"lead", "dev", "docs"}


async def _claims(coord: Coordination, seat: str, item: str, n: int, *, start: int = 0) -> list[bool]:
    return [
        await tools.claim_comment_wake(coord, seat, item, comment_id=f"c-{i}")
        for i in range(start, start + n)
    ]


async def test_six_wakes_per_seat_and_item_then_no(coord: Coordination) -> None:
    assert await _claims(coord, "lead", "ENG-1", 7) == [True] * 6 + [False]
    # another seat on the item, and the seat on another item, count on their own
    assert await _claims(coord, "dev", "ENG-1", 1) == [True]
    assert await _claims(coord, "lead", "ENG-2", 1) == [True]
    keys = [e.key for e in await coord.entries("wakes", "lead.ENG-1.")]
    assert keys == [f"lead.ENG-1.{n}" for n in range(6)]


async def test_one_comment_counts_once(coord: Coordination) -> None:
    assert await _claims(coord, "lead", "ENG-1", 1) == [True]
    # the same comment again (an API retry with the same op_id): admitted, not counted again
    assert await tools.claim_comment_wake(coord, "lead", "ENG-1", comment_id="c-0") is True
    assert await _claims(coord, "lead", "ENG-1", 6, start=1) == [True] * 5 + [False]
    assert await tools.claim_comment_wake(coord, "lead", "ENG-1", comment_id="c-3") is True


async def test_racing_writers_admit_exactly_six(coord: Coordination) -> None:
    # ten nodes' comments at once: create-only-if-absent lets exactly one writer take each key
    results = await asyncio.gather(
        *(tools.claim_comment_wake(coord, "lead", "ENG-1", comment_id=f"c-{i}") for i in range(10))
    )
    assert sorted(results) == [False] * 4 + [True] * 6


async def test_a_key_that_is_not_kv_safe_is_hashed(coord: Coordination) -> None:
    assert await tools.claim_comment_wake(coord, "lead", "github:1296269#1347", comment_id="c") is True
    [entry] = await coord.entries("wakes", "lead.h_")
    assert json.loads(entry.value)["work_item"] == "github:1296269#1347"


async def test_the_window_slides_with_the_bucket_age() -> None:
    now = [0.0]
    coord = MemoryCoordination(clock=lambda: now[0])
    assert await _claims(coord, "lead", "ENG-1", 7) == [True] * 6 + [False]
    now[0] = 3599.0
    assert await _claims(coord, "lead", "ENG-1", 1, start=10) == [False]
    now[0] = 3600.0  # the first six aged out of the bucket: a fresh hour
    assert await _claims(coord, "lead", "ENG-1", 7, start=20) == [True] * 6 + [False]


async def test_the_wakes_bucket_ages_keys_out_after_an_hour(nats_server: Any) -> None:
    nc, _ = await connect(nats_server.url, timeout=10, name="t")
    try:
        await provision(nc.jetstream(), lease_ttl=timedelta(seconds=2))
        info = await nc.jetstream().stream_info("KV_crewlet_wakes")
        assert info.config.max_age == 3600.0  # FL-34: retention is the bucket's age, not a key TTL
    finally:
        await nc.close()


async def test_an_unknown_answer_is_raised_not_read_as_no() -> None:
    with pytest.raises(CoordinationUnavailable):
        await tools.claim_comment_wake(FaultyCoordination(), "lead", "ENG-1", comment_id="c")


@pytest.fixture
async def wired(nats_server: Any) -> AsyncIterator[tuple[Client, Bus, Coordination]]:
    """A real broker with the bus streams, every seat's mailbox and the coordination buckets."""
    nc, _ = await connect(nats_server.url, timeout=10, name="t")
    try:
        bus = Bus(nc, nc.jetstream())
        await bus.provision()
        await bus.ensure_mailboxes(sorted(AGENTS))  # the inbox stream keeps what a mailbox awaits
        coord = await provision(nc.jetstream(), lease_ttl=timedelta(seconds=2))
        yield nc, bus, coord
    finally:
        await nc.close()


async def _inbox(nc: Client, seat: str) -> list[dict[str, Any]]:
    """Every envelope stored for ``seat``'s inbox (and not yet acked), oldest first."""
    js = nc.jetstream()
    sub = await js.subscribe(inbox_subject(seat), ordered_consumer=True)
    out: list[dict[str, Any]] = []
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=0.5)
            except TimeoutError:
                return out
            out.append(json.loads(msg.data))
    finally:
        await sub.unsubscribe()


async def test_the_seventh_comment_wakes_nobody(wired: tuple[Client, Bus, Coordination]) -> None:
    nc, bus, coord = wired
    woken = []
    for n in range(7):
        comment = {"id": f"c-{n}", "body": f"update {n} for @dev"}
        with structlog.testing.capture_logs() as logs:
            woken.append(
                await tools.publish_comment_wakes(
                    bus, coord, ITEM, comment, author="operator:ops", agent_seats=AGENTS, parent_turn_id="t-1"
                )
            )
    assert woken == [["lead", "dev"]] * 6 + [[]]
    limited = sorted((e["seat"], e["work_item"]) for e in logs if e["event"] == "comment_wake_limited")
    assert limited == [("dev", "ENG-1"), ("lead", "ENG-1")]
    lead, dev = await _inbox(nc, "lead"), await _inbox(nc, "dev")
    assert [e["payload"]["reason"] for e in lead] == ["commented"] * 6
    assert [e["payload"]["reason"] for e in dev] == ["mentioned"] * 6
    first = dev[0]
    assert first["payload"]["comment"] == {"id": "c-0", "body": "update 0 for @dev", "author": "operator:ops"}
    assert (
        first["work_item"] == "ENG-1" and first["parent_turn_id"] == "t-1" and first["delegation_depth"] == 0
    )


async def test_publishing_one_comment_twice_stores_its_wakes_once(
    wired: tuple[Client, Bus, Coordination],
) -> None:
    nc, bus, coord = wired
    comment = {"id": "c-1", "body": "ping"}
    for _ in range(2):
        assert await tools.publish_comment_wakes(
            bus, coord, ITEM, comment, author="dev", agent_seats=AGENTS
        ) == ["lead"]
    assert len(await _inbox(nc, "lead")) == 1
    assert len(await coord.entries("wakes", "lead.")) == 1


@pytest.mark.parametrize("store", ["faulty", "none"])
async def test_an_unknown_count_fails_open(wired: tuple[Client, Bus, Coordination], store: str) -> None:
    nc, bus, _ = wired
    coord = FaultyCoordination() if store == "faulty" else None
    with structlog.testing.capture_logs() as logs:
        for n in range(8):
            comment = {"id": f"c-{n}", "body": "again"}
            assert await tools.publish_comment_wakes(
                bus, coord, ITEM, comment, author="operator:ops", agent_seats=AGENTS
            ) == ["lead"]
    assert len(await _inbox(nc, "lead")) == 8
    assert sum(e["event"] == "comment_wake_limit_unknown" for e in logs) == 8
