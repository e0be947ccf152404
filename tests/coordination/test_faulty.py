"""FL-32/FL-33 against the faulty backend: unknown is never "no", and each contract fails its own way.

FL-33's table has one row per contract; these are the rows whose components exist here (lease
renew, the completion ledger). The other rows (rate valve, delivery dedupe, budget charge, duty
claim, cooldowns) belong to their own components and their own tests.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from shared.coordination import Coordination, CoordinationUnavailable, FaultyCoordination
from shared.leases import Ledger, SeatHost, SeatLeases, check_epoch
from shared.runtime import PROTOCOL_VERSION

from .wrappers import Switchable

TTL = timedelta(seconds=3)


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.get("leases", "seat.a"),
        lambda c: c.create("leases", "seat.a", b"x"),
        lambda c: c.update("leases", "seat.a", b"x", revision=1),
        lambda c: c.put("leases", "seat.a", b"x"),
        lambda c: c.delete("leases", "seat.a"),
        lambda c: c.entries("leases"),
    ],
    ids=["get", "create", "update", "put", "delete", "entries"],
)
async def test_every_faulty_call_is_unknown(call: Any) -> None:
    """FL-32: the faulty backend makes every call raise the one *unknown* type."""
    with pytest.raises(CoordinationUnavailable, match="coordination store unavailable"):
        await call(FaultyCoordination())


async def test_lease_questions_answer_unknown_never_no() -> None:
    """FL-32: "I could not ask" is an exception, never None/False (no seat released, none claimed)."""
    faulty = FaultyCoordination()
    leases = SeatLeases(faulty, node_id="n1", owner="n1:00000000", protocol=PROTOCOL_VERSION, ttl=TTL)
    with pytest.raises(CoordinationUnavailable):
        await leases.acquire("triage")
    with pytest.raises(CoordinationUnavailable):
        await check_epoch(faulty, "triage", 1)
    host = SeatHost(faulty, node_id="n1", owner="n1:00000000", protocol=PROTOCOL_VERSION, ttl=TTL)
    with pytest.raises(CoordinationUnavailable):
        await host.claim("triage")
    host.assign(["triage"])
    assert await host.sweep() == {"triage": None}  # logged seat_claim_unknown; nothing held, nothing raised


class _Row:
    """One FL-33 row: sets itself up on a healthy store, then runs with the store unreachable."""

    async def prepare(self, store: Switchable) -> None:
        raise NotImplementedError

    async def check(self, store: Switchable) -> None:
        raise NotImplementedError


class LeaseRenewRow(_Row):
    """Lease renew: hold the seat briefly, admit nothing new (FL-53)."""

    async def prepare(self, store: Switchable) -> None:
        self.released: list[tuple[str, str]] = []

        async def on_release(handle: str, reason: str) -> None:
            self.released.append((handle, reason))

        self.host = SeatHost(
            store,
            node_id="n1",
            owner="n1:00000000",
            protocol=PROTOCOL_VERSION,
            ttl=TTL,
            on_release=on_release,
        )
        self.host.assign(["triage", "writer"])
        await self.host.sweep()
        self.epochs = self.host.held()
        assert set(self.epochs) == {"triage", "writer"}

    async def check(self, store: Switchable) -> None:
        assert await self.host.renew_all() == {"triage": None, "writer": None}
        assert self.host.held() == self.epochs  # held briefly
        assert self.released == []  # no seat released
        assert all(self.host.may_start(h) is None for h in self.epochs)  # nothing new admitted
        assert all(self.host.holds(h, e) for h, e in self.epochs.items())  # a finished turn may still ack


class LedgerRow(_Row):
    """Completion ledger read/write: open: run the turn; the write is best effort (FL-89)."""

    async def prepare(self, store: Switchable) -> None:
        self.ledger = Ledger(store)
        assert await self.ledger.record("triage", "evt-1", {"turn_id": "t1"}) is True
        assert await self.ledger.worked("triage", ["evt-1", "evt-2"]) == {"evt-1"}

    async def check(self, store: Switchable) -> None:
        assert await self.ledger.worked("triage", ["evt-1", "evt-2"]) == set()  # unreadable: run it
        assert await self.ledger.record("triage", "evt-2", {"turn_id": "t2"}) is False  # logged, ignored


@pytest.mark.parametrize(
    "row", [LeaseRenewRow, LedgerRow], ids=["lease renew", "completion ledger read/write"]
)
async def test_fl33_failure_direction(row: type[_Row], coord: Coordination) -> None:
    """FL-33: one test per row (over each backend), the store made unreachable after a healthy start."""
    store = Switchable(coord)
    case = row()
    await case.prepare(store)
    store.broken = True
    await case.check(store)
