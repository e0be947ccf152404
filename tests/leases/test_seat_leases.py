"""Seat lease protocol on real NATS KV: claim, epochs, lapse, renew, release (FL-48..FL-51, FL-74)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from shared.coordination import Coordination, CoordinationUnavailable, MemoryCoordination
from shared.leases import LeaseContention, SeatLeases, check_epoch, current_epoch
from shared.runtime import PROTOCOL_VERSION
from tests.coordination.wrappers import LostReplies

from .conftest import TTL

LAPSE = TTL.total_seconds() + 0.6  # NATS ages a key out ~0.25 s after the bucket age


def leases(coord: Coordination, node: str, tag: str = "00000000") -> SeatLeases:
    return SeatLeases(coord, node_id=node, owner=f"{node}:{tag}", protocol=PROTOCOL_VERSION, ttl=TTL)


async def test_epochs_only_rise_across_claim_release_claim_and_owners(kv: Coordination) -> None:
    a, b = leases(kv, "n1"), leases(kv, "n2")
    seen = []
    for who in (a, a, b, a, b):
        grant = await who.acquire("triage")
        assert grant is not None
        seen.append(grant.epoch)
        assert await current_epoch(kv, "triage") == grant.epoch
        assert await who.release(grant) is True
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    assert seen[0] >= 1


async def test_a_held_seat_cannot_be_claimed_until_its_lease_lapses(kv: Coordination) -> None:
    a, b = leases(kv, "n1"), leases(kv, "n2")
    held = await a.acquire("triage")
    assert held is not None
    assert await b.acquire("triage") is None
    await asyncio.sleep(LAPSE)  # A stops renewing
    taken = await b.acquire("triage")
    assert taken is not None and taken.epoch == held.epoch + 1
    lease = await b.read("triage")
    assert lease is not None and lease.record.owner == b.owner


async def test_the_same_owner_after_a_lapse_gets_a_new_epoch(kv: Coordination) -> None:
    a = leases(kv, "n1")
    first = await a.acquire("triage")
    assert first is not None
    again = await a.acquire("triage")  # unbroken hold: adopted, same epoch
    assert again is not None and again.epoch == first.epoch
    await asyncio.sleep(LAPSE)
    after = await a.acquire("triage")
    assert after is not None and after.epoch == first.epoch + 1


async def test_renew_after_the_lease_lapsed_and_a_peer_claimed_reports_lost(kv: Coordination) -> None:
    a, b = leases(kv, "n1"), leases(kv, "n2")
    grant = await a.acquire("triage")
    assert grant is not None
    renewed = await a.renew(grant)
    assert renewed is not None and renewed.revision > grant.revision and renewed.epoch == grant.epoch
    await asyncio.sleep(LAPSE)
    peer = await b.acquire("triage")
    assert peer is not None
    assert await a.renew(renewed) is None
    assert await a.release(renewed) is False  # fenced: the peer's lease is untouched
    lease = await b.read("triage")
    assert lease is not None and lease.record.owner == b.owner


async def test_renew_keeps_the_lease_past_its_ttl(kv: Coordination) -> None:
    a, b = leases(kv, "n1"), leases(kv, "n2")
    grant = await a.acquire("triage")
    assert grant is not None
    for _ in range(4):  # 2.4 s: longer than the TTL
        await asyncio.sleep(TTL.total_seconds() / 3)
        renewed = await a.renew(grant)
        assert renewed is not None
        grant = renewed
    assert await b.acquire("triage") is None


async def test_32_concurrent_claimants_produce_exactly_one_holder(kv: Coordination) -> None:
    """FL-50 accept: exactly one holder, whose epoch is previous + 1."""
    first = leases(kv, "n0")
    grant = await first.acquire("triage")
    assert grant is not None
    await first.release(grant)
    claimants = [leases(kv, f"n{i}", f"{i:08x}") for i in range(1, 33)]
    results = await asyncio.gather(*(c.acquire("triage") for c in claimants))
    winners = [g for g in results if g is not None]
    assert len(winners) == 1
    assert winners[0].epoch == grant.epoch + 1
    assert await current_epoch(kv, "triage") == grant.epoch + 1


async def test_two_concurrent_claims_by_one_owner_share_one_epoch(kv: Coordination) -> None:
    a = leases(kv, "n1")
    one, two = await asyncio.gather(a.acquire("triage"), a.acquire("triage"))
    assert one is not None and two is not None
    assert one.epoch == two.epoch == await current_epoch(kv, "triage")


async def test_a_lease_reads_back_every_field(kv: Coordination) -> None:
    """FL-48: resource, owner, node, epoch, TTL, protocol, preferred and the store's expiry."""
    a = leases(kv, "n1", "abcdef01")
    grant = await a.acquire("triage")
    assert grant is not None
    lease = await a.read("triage")
    assert lease is not None
    rec = lease.record
    assert (rec.resource, rec.owner, rec.node, rec.epoch) == ("seat:triage", "n1:abcdef01", "n1", grant.epoch)
    assert (rec.protocol, rec.ttl, lease.preferred) == (PROTOCOL_VERSION, TTL.total_seconds(), "n1")
    assert lease.expires_at - lease.written_at == TTL and not lease.claiming
    assert lease.revision == grant.revision


async def test_check_epoch_refuses_a_write_under_an_older_epoch(kv: Coordination) -> None:
    """FL-74: a data node refuses a write whose epoch is older than the seat's current one."""
    a, b = leases(kv, "n1"), leases(kv, "n2")
    old = await a.acquire("triage")
    assert old is not None
    assert await check_epoch(kv, "triage", old.epoch) is True
    await a.release(old)
    new = await b.acquire("triage")
    assert new is not None
    assert await check_epoch(kv, "triage", old.epoch) is False
    assert await check_epoch(kv, "triage", new.epoch) is True
    assert await check_epoch(kv, "triage", 0) is False
    assert await check_epoch(kv, "never-claimed", 1) is True


async def test_check_epoch_unknown_is_an_exception_not_a_refusal() -> None:
    from shared.coordination import FaultyCoordination

    with pytest.raises(CoordinationUnavailable):
        await check_epoch(FaultyCoordination(), "triage", 3)


async def test_lost_replies_are_recognised_on_reread(kv: Coordination) -> None:
    """A write that landed but whose reply was lost is ours: decided by re-reading (infra-facts N1)."""
    for lose in range(1, 5):
        lossy = LostReplies(kv, lose=lose)
        a = leases(lossy, "n1", f"{lose:08x}")
        before = await current_epoch(kv, "triage")
        grant = await a.acquire("triage")
        assert grant is not None and grant.epoch == before + 1
        assert lossy.lost == lose
        lossy.lose = 1
        renewed = await a.renew(grant)
        assert renewed is not None and renewed.epoch == grant.epoch
        lossy.lose = 1
        assert await a.release(renewed) is True
        assert await a.read("triage") is None


async def test_exhausted_compare_and_set_rounds_are_unknown() -> None:
    """FL-51: 64 lost rounds raise (unknown), never "somebody else holds it"."""
    store = MemoryCoordination(lease_ttl=timedelta(seconds=2))
    a = leases(store, "n1")
    grant = await a.acquire("triage")
    assert grant is not None
    with pytest.raises(LeaseContention) as info:
        await leases(LostReplies(store, conflict_always=True), "n1").renew(grant)
    assert isinstance(info.value, CoordinationUnavailable) and info.value.rounds == 64


async def test_a_claim_is_visible_to_the_same_callers_next_listing(kv: Coordination) -> None:
    """FL-37 accept: an acquire followed immediately by a listing includes the resource."""
    a = leases(kv, "n1")
    grants = await asyncio.gather(*(a.acquire(f"s{i}") for i in range(10)))
    assert all(g is not None for g in grants)
    listed = {e.key for e in await kv.entries("leases", "seat.")}
    assert listed == {f"seat.s{i}" for i in range(10)}


async def test_an_unreadable_counter_is_never_reset(kv: Coordination) -> None:
    """FL-49: a garbled counter must not restart at 1 (a zombie's token would be valid again)."""
    a = leases(kv, "n1")
    epochs = []
    for _ in range(3):
        grant = await a.acquire("triage")
        assert grant is not None
        epochs.append(grant.epoch)
        await a.release(grant)
    last = epochs[-1]
    assert last == 3
    entry = await kv.get("epochs", "seat.triage")
    assert entry is not None
    await kv.update("epochs", "seat.triage", b"\x00garbled", revision=entry.revision)
    assert await current_epoch(kv, "triage") >= last  # the floor, not 0
    after = await a.acquire("triage")
    assert after is not None and after.epoch > last
    assert await check_epoch(kv, "triage", last) is False


async def test_releasing_a_seat_no_longer_held_says_nothing_was_handed_back(kv: Coordination) -> None:
    """Issue 35 (upstream's lease conformance): a second release, a lapsed lease → False, not "released"."""
    a = leases(kv, "n1")
    grant = await a.acquire("triage")
    assert grant is not None
    assert await a.release(grant) is True
    assert await a.release(grant) is False  # released already
    lapsing = await a.acquire("triage")
    assert lapsing is not None
    await asyncio.sleep(LAPSE)  # never renewed: the store ages it out
    assert await a.release(lapsing) is False
