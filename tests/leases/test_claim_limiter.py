"""FL-56's claim limiter counts what it was sized against: seats that fork MCP children (issue 13).

A plan over a real NATS lease bucket, with this node the only live one (share = every seat): seats
that spawn nothing are all claimed at once; seats with a per-seat stdio server are claimed at most
four per sweep window, also across nudged sweeps inside one window.
"""

from __future__ import annotations

from shared.coordination import Coordination
from shared.leases import MAX_CLAIMS_PER_SWEEP, FairShare

from .conftest import Clock

SEATS = [f"s{i:02d}" for i in range(12)]
SPAWNING = {h for i, h in enumerate(SEATS) if i % 2 == 0}  # s00, s02, ... start a stdio server


def _policy(kv: Coordination, clock: Clock, spawns: bool = True) -> FairShare:
    return FairShare(
        kv,
        node_id="a",
        labels={},
        protocol=3,
        selectors=dict,
        clock=clock,
        spawns=(lambda h: h in SPAWNING) if spawns else None,
    )


async def test_seats_that_spawn_nothing_are_claimed_without_spending_the_budget(kv: Coordination) -> None:
    clock = Clock()
    fair = _policy(kv, clock)
    plan = await fair.plan(SEATS, {})
    claimed = list(plan.claim)
    quiet = [h for h in SEATS if h not in SPAWNING]
    assert [h for h in claimed if h not in SPAWNING] == quiet  # all six, in org order
    assert [h for h in claimed if h in SPAWNING] == ["s00", "s02", "s04", "s06"]

    # a nudged sweep inside the same window claims no further spawning seat
    held = dict.fromkeys(claimed, 1)
    assert list((await fair.plan(SEATS, held)).claim) == []

    clock.advance(5.0)  # the next window: the rest of the spawning seats
    assert list((await fair.plan(SEATS, held)).claim) == ["s08", "s10"]


async def test_without_a_spawn_oracle_every_claim_counts(kv: Coordination) -> None:
    fair = _policy(kv, Clock(), spawns=False)
    plan = await fair.plan(SEATS, {})
    assert list(plan.claim) == SEATS[:MAX_CLAIMS_PER_SWEEP]
