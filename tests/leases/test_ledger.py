"""The completion ledger on real NATS KV (FL-88..FL-90)."""

from __future__ import annotations

from datetime import UTC, datetime

from shared.coordination import Coordination
from shared.leases import Ledger


async def test_a_partly_overlapping_redelivery_runs_only_what_is_new(kv: Coordination) -> None:
    """FL-88: A and B done, then A+B+C redelivered: only C is new."""
    ledger = Ledger(kv)
    assert await ledger.worked("triage", ["evt-a", "evt-b", "evt-c"]) == set()
    for key in ("evt-a", "evt-b"):
        assert await ledger.record("triage", key, {"turn_id": "t1"}, at=datetime(2026, 1, 1, tzinfo=UTC))
    assert await ledger.worked("triage", ["evt-a", "evt-b", "evt-c"]) == {"evt-a", "evt-b"}
    assert await ledger.worked("writer", ["evt-a"]) == set()  # scoped per seat


async def test_keys_that_cannot_be_kv_keys_are_hashed_injectively(kv: Coordination) -> None:
    ledger = Ledger(kv)
    odd = ["a.b", "a_b", "with space", "ünïcode", "h_abc", "*"]
    assert len({Ledger.key("triage", k) for k in odd}) == len(odd)
    await ledger.record("triage", "a.b")
    assert await ledger.worked("triage", odd) == {"a.b"}
