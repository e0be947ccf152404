"""The coordination contract (FL-32..FL-39), run unchanged over the in-memory twin and NATS KV."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from shared.coordination import Coordination, RevisionConflict

from .conftest import CONTRACT_TTL


async def test_absent_key_reads_none(coord: Coordination) -> None:
    assert await coord.get("leases", "seat.nobody") is None
    assert await coord.get("epochs", "seat.nobody") is None


async def test_create_then_read_your_own_write(coord: Coordination) -> None:
    before = datetime.now(UTC) - timedelta(seconds=5)
    rev = await coord.create("epochs", "seat.a", b"one")
    entry = await coord.get("epochs", "seat.a")
    assert entry is not None
    assert (entry.key, entry.value, entry.revision) == ("seat.a", b"one", rev)
    assert rev > 0
    assert entry.created.tzinfo is not None and entry.created >= before


async def test_create_refuses_an_existing_key(coord: Coordination) -> None:
    await coord.create("epochs", "seat.a", b"one")
    with pytest.raises(RevisionConflict) as info:
        await coord.create("epochs", "seat.a", b"two")
    assert info.value.expected == 0
    entry = await coord.get("epochs", "seat.a")
    assert entry is not None and entry.value == b"one"


async def test_update_is_compare_and_set(coord: Coordination) -> None:
    r1 = await coord.create("epochs", "seat.a", b"one")
    r2 = await coord.update("epochs", "seat.a", b"two", revision=r1)
    assert r2 > r1
    with pytest.raises(RevisionConflict):
        await coord.update("epochs", "seat.a", b"stale", revision=r1)
    with pytest.raises(RevisionConflict):
        await coord.update("epochs", "seat.a", b"only-if-absent", revision=0)
    entry = await coord.get("epochs", "seat.a")
    assert entry is not None and (entry.value, entry.revision) == (b"two", r2)


async def test_update_at_revision_zero_creates_an_absent_key(coord: Coordination) -> None:
    rev = await coord.update("epochs", "seat.b", b"new", revision=0)
    entry = await coord.get("epochs", "seat.b")
    assert entry is not None and (entry.value, entry.revision) == (b"new", rev)


async def test_update_of_an_absent_key_at_a_revision_conflicts(coord: Coordination) -> None:
    with pytest.raises(RevisionConflict):
        await coord.update("epochs", "seat.none", b"x", revision=7)


async def test_revisions_only_rise(coord: Coordination) -> None:
    revs = [await coord.put("epochs", "seat.a", b"0")]
    for i in range(1, 5):
        revs.append(await coord.update("epochs", "seat.a", str(i).encode(), revision=revs[-1]))
    revs.append(await coord.put("epochs", "seat.a", b"p"))
    assert revs == sorted(revs) and len(set(revs)) == len(revs)


async def test_put_overwrites_unconditionally(coord: Coordination) -> None:
    await coord.create("ledger", "k", b"one")
    rev = await coord.put("ledger", "k", b"two")
    entry = await coord.get("ledger", "k")
    assert entry is not None and (entry.value, entry.revision) == (b"two", rev)


async def test_delete_reports_presence(coord: Coordination) -> None:
    await coord.create("ledger", "k", b"v")
    assert await coord.delete("ledger", "k") is True
    assert await coord.get("ledger", "k") is None
    assert await coord.delete("ledger", "k") is False


async def test_delete_at_a_stale_revision_conflicts_and_keeps_the_key(coord: Coordination) -> None:
    r1 = await coord.create("leases", "seat.a", b"one")
    r2 = await coord.update("leases", "seat.a", b"two", revision=r1)
    with pytest.raises(RevisionConflict):
        await coord.delete("leases", "seat.a", revision=r1)
    assert await coord.get("leases", "seat.a") is not None
    assert await coord.delete("leases", "seat.a", revision=r2) is True
    assert await coord.get("leases", "seat.a") is None


async def test_create_after_delete_works_at_a_higher_revision(coord: Coordination) -> None:
    r1 = await coord.create("leases", "seat.a", b"one")
    await coord.delete("leases", "seat.a", revision=r1)
    r2 = await coord.create("leases", "seat.a", b"again")
    assert r2 > r1
    entry = await coord.get("leases", "seat.a")
    assert entry is not None and entry.value == b"again"


async def test_one_of_two_racing_compare_and_sets_wins(coord: Coordination) -> None:
    base = await coord.create("epochs", "seat.race", b"0")
    results = await asyncio.gather(
        coord.update("epochs", "seat.race", b"a", revision=base),
        coord.update("epochs", "seat.race", b"b", revision=base),
        return_exceptions=True,
    )
    wins = [r for r in results if isinstance(r, int)]
    losses = [r for r in results if isinstance(r, RevisionConflict)]
    assert len(wins) == 1 and len(losses) == 1


async def test_entries_lists_live_keys_by_prefix_in_key_order(coord: Coordination) -> None:
    for key in ("seat.c", "seat.a", "node.n1", "seat.b"):
        await coord.put("leases", key, key.encode())
    await coord.delete("leases", "seat.b")
    seats = await coord.entries("leases", "seat.")
    assert [e.key for e in seats] == ["seat.a", "seat.c"]
    assert [e.value for e in seats] == [b"seat.a", b"seat.c"]
    every = await coord.entries("leases")
    assert [e.key for e in every] == ["node.n1", "seat.a", "seat.c"]
    assert await coord.entries("ledger") == []


async def test_slots_are_separate_buckets(coord: Coordination) -> None:
    await coord.put("leases", "seat.a", b"lease")
    await coord.put("epochs", "seat.a", b"epoch")
    lease, epoch = await coord.get("leases", "seat.a"), await coord.get("epochs", "seat.a")
    assert lease is not None and epoch is not None
    assert (lease.value, epoch.value) == (b"lease", b"epoch")


async def test_unknown_slot_is_a_usage_error(coord: Coordination) -> None:
    with pytest.raises(ValueError):
        await coord.get("nope", "k")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await coord.put("nope", "k", b"v")  # type: ignore[arg-type]


async def test_the_lease_bucket_ages_keys_out_and_a_write_restarts_the_age(coord: Coordination) -> None:
    """FL-34: retention is the bucket's age; a renewal (a new write) restarts it, no per-key TTL."""
    ttl = CONTRACT_TTL.total_seconds()
    r1 = await coord.create("leases", "seat.a", b"held")
    await coord.create("epochs", "seat.a", b"7")
    await asyncio.sleep(ttl * 0.6)
    r2 = await coord.update("leases", "seat.a", b"renewed", revision=r1)
    await asyncio.sleep(ttl * 0.6)  # 1.2 TTL after the create, 0.6 TTL after the renewal
    entry = await coord.get("leases", "seat.a")
    assert entry is not None and entry.value == b"renewed"
    await asyncio.sleep(ttl * 0.8)  # 1.4 TTL after the renewal (NATS expires ~0.25 s late)
    assert await coord.get("leases", "seat.a") is None
    assert [e.key for e in await coord.entries("leases")] == []
    with pytest.raises(RevisionConflict):
        await coord.update("leases", "seat.a", b"too late", revision=r2)
    assert await coord.create("leases", "seat.a", b"fresh") > r2
    counter = await coord.get("epochs", "seat.a")  # no age: the counter outlives the lease (FL-49)
    assert counter is not None and counter.value == b"7"
