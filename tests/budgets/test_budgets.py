"""Charge, settle, refusal, reset and compensation over the in-memory store (CO-37, FL-119)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
import structlog.testing

from shared.budgets import BudgetExhausted, Budgets, BudgetUnavailable, UnknownScope
from shared.config import OrgModel
from shared.coordination import Coordination, MemoryCoordination

from .conftest import Clock, company_data, org_of


class Holder:
    """The applied company, swappable like a node's ``ctx.org``."""

    def __init__(self, org: OrgModel | None) -> None:
        self.org = org

    def __call__(self) -> OrgModel | None:
        return self.org


def make(
    org: dict[str, int] | None = None, seats: dict[str, Any] | None = None, **kw: Any
) -> tuple[Budgets, MemoryCoordination, Holder, Clock, OrgModel]:
    model = org_of(company_data(org=org, seats=seats))
    coord = MemoryCoordination()
    holder, clock = Holder(model), Clock()
    return Budgets(coord, holder, clock=clock, **kw), coord, holder, clock, model


def aid(model: OrgModel, handle: str) -> str:
    seat = model.seat(handle)
    assert seat is not None
    return str(seat.agent_id)


async def spent(coord: Coordination, key: str) -> int | None:
    e = await coord.get("budgets", key)
    return None if e is None else int(json.loads(e.value)["spent"])


async def test_charge_counts_every_capped_window_of_org_and_seat() -> None:
    b, coord, _h, _c, m = make(org={"day": 1000, "month": 5000}, seats={"a": {"week": 300}, "b": None})
    a = aid(m, "a")
    charge = await b.charge(a, 100)
    assert [(w.scope, w.period, w.window) for w in charge.windows] == [
        ("org", "day", "2026-11-29"),
        ("org", "month", "2026-11"),
        (f"agent:{a}", "week", "2026-W48"),
    ]
    assert await spent(coord, "org.day.2026-11-29") == 100
    assert await spent(coord, "org.month.2026-11") == 100
    assert await spent(coord, f"agent-{a}.week.2026-W48") == 100
    assert await spent(coord, "org.week.2026-W48") is None  # uncapped: never written
    await b.charge(aid(m, "b"), 50)  # b has no cap of its own: only the org counts it
    assert await spent(coord, "org.day.2026-11-29") == 150
    assert [k.key for k in await coord.entries("budgets")] == [
        f"agent-{a}.week.2026-W48",
        "org.day.2026-11-29",
        "org.month.2026-11",
    ]


async def test_no_cap_writes_nothing_and_needs_no_store() -> None:
    model = org_of(company_data())
    b = Budgets(None, lambda: model)
    charge = await b.charge(aid(model, "a"), 10**9)
    assert charge.windows == ()
    await b.settle(charge, 5)
    assert await b.refusal(aid(model, "a")) is None


async def test_the_round_that_would_cross_the_ceiling_is_refused_and_increments_nothing() -> None:
    b, coord, _h, clock, m = make(org={"day": 1000})
    a = aid(m, "a")
    await b.charge(a, 600)
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(BudgetExhausted) as caught:
            await b.charge(a, 401)
    e = caught.value
    assert e.to_dict() == {
        "scope": "org",
        "period": "day",
        "resets_at": "2026-11-30T00:00:00+00:00",
        "spent": 600,
        "ceiling": 1000,
        "requested": 401,
    }
    assert e.requested == 401 and not e.retryable
    assert await spent(coord, "org.day.2026-11-29") == 600
    assert logs == []  # the turn loop logs budget_exhausted with its turn's context
    await b.charge(a, 400)  # exactly to the ceiling is admitted
    assert await spent(coord, "org.day.2026-11-29") == 1000
    with pytest.raises(BudgetExhausted):
        await b.charge(a, 1)
    clock.at = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)  # the window turns
    await b.charge(a, 1)
    assert await spent(coord, "org.day.2026-11-30") == 1


async def test_a_seat_refusal_compensates_the_org() -> None:
    b, coord, _h, _c, m = make(org={"day": 1000, "week": 5000}, seats={"a": {"day": 100}, "b": None})
    a = aid(m, "a")
    await b.charge(a, 80)
    with pytest.raises(BudgetExhausted) as caught:
        await b.charge(a, 30)
    assert caught.value.scope == f"agent:{a}" and caught.value.spent == 80
    assert await spent(coord, "org.day.2026-11-29") == 80
    assert await spent(coord, "org.week.2026-W48") == 80
    assert await spent(coord, f"agent-{a}.day.2026-11-29") == 80
    await b.charge(aid(m, "b"), 900)  # the org had room for b all along
    assert await spent(coord, "org.day.2026-11-29") == 980


async def test_a_later_org_window_refusing_takes_back_the_earlier_one() -> None:
    b, coord, _h, _c, m = make(org={"day": 1000, "month": 150})
    with pytest.raises(BudgetExhausted) as caught:
        await b.charge(aid(m, "a"), 200)
    assert (caught.value.scope, caught.value.period) == ("org", "month")
    assert caught.value.resets_at == datetime(2026, 12, 1, tzinfo=UTC)
    assert await spent(coord, "org.day.2026-11-29") == 0


async def test_settle_adjusts_by_actual_minus_reserved_and_logs_an_overrun() -> None:
    b, coord, _h, _c, m = make(org={"day": 1000}, seats={"a": {"day": 500}})
    a = aid(m, "a")
    charge = await b.charge(a, 400)
    with structlog.testing.capture_logs() as logs:
        await b.settle(charge, 250)
    assert logs == []
    assert await spent(coord, "org.day.2026-11-29") == 250
    assert await spent(coord, f"agent-{a}.day.2026-11-29") == 250
    charge = await b.charge(a, 200)
    with structlog.testing.capture_logs() as logs:
        await b.settle(charge, 300)  # past the seat's 500: unchecked, but logged
    assert await spent(coord, f"agent-{a}.day.2026-11-29") == 550
    assert [(r["event"], r["scope"], r["spent"], r["ceiling"], r["over"]) for r in logs] == [
        ("budget_overrun", f"agent:{a}", 550, 500, 50)
    ]
    refusal = await b.refusal(a)
    assert refusal is not None and refusal["scope"] == f"agent:{a}" and refusal["spent"] == 550
    assert refusal == {
        "scope": f"agent:{a}",
        "period": "day",
        "resets_at": "2026-11-30T00:00:00+00:00",
        "spent": 550,
        "ceiling": 500,
        "requested": 1,
    }


async def test_settle_to_less_never_goes_below_zero_after_a_reset() -> None:
    b, coord, _h, _c, m = make(org={"day": 1000})
    charge = await b.charge(aid(m, "a"), 400)
    await b.reset("org")
    await b.settle(charge, 100)
    assert await spent(coord, "org.day.2026-11-29") == 0


async def test_refused_at_is_shared_and_cleared_by_the_next_admitted_charge() -> None:
    b, coord, _h, _c, m = make(org={"day": 1000})
    other = Budgets(coord, lambda: m, clock=Clock())  # another node on the same store
    a = aid(m, "a")
    await b.charge(a, 900)
    with pytest.raises(BudgetExhausted):
        await b.charge(a, 200)
    snap = await other.snapshot()
    assert snap["refusing"] == ["org"]
    assert snap["scopes"][0]["refused_at"] == "2026-11-29T12:00:00+00:00"
    assert snap["scopes"][0]["windows"]["day"]["refused_at"] == "2026-11-29T12:00:00+00:00"
    # a standing refusal keeps the seat parked even though 1 token would fit
    parked = await other.exhaustion(a)
    assert parked is not None and parked.requested == 200 and parked.spent == 900
    assert await other.refusal(a) == parked.to_dict()
    await other.charge(a, 50)  # an admitted charge clears it, on any node
    assert (await b.snapshot())["scopes"][0]["refused_at"] is None
    assert await b.refusal(a) is None


async def test_raising_the_ceiling_releases_a_refusing_scope() -> None:
    b, _coord, holder, _c, m = make(org={"day": 1000})
    a = aid(m, "a")
    await b.charge(a, 1000)
    with pytest.raises(BudgetExhausted):
        await b.charge(a, 10)
    assert await b.refusal(a) is not None
    holder.org = org_of(company_data(org={"day": 2000}))  # a revision raises the ceiling
    assert await b.refusal(a) is None
    snap = await b.snapshot()
    assert snap["refusing"] == [] and snap["scopes"][0]["windows"]["day"]["state"] == "ok"
    await b.charge(a, 10)


async def test_snapshot_states_and_shape() -> None:
    b, _coord, _h, _c, m = make(org={"day": 1000}, seats={"a": {"week": 100, "month": 1000}, "b": None})
    a = aid(m, "a")
    await b.charge(a, 95)
    snap = await b.snapshot()
    assert snap["timezone"] == "UTC" and snap["windows"]["week"]["window"] == "2026-W48"
    assert [s["scope"] for s in snap["scopes"]] == ["org", f"agent:{a}"]  # b has no cap: not listed
    org, seat = snap["scopes"]
    assert org["caps"] == {"day": 1000} and org["state"] == "ok" and org["handle"] is None
    assert seat["handle"] == "a" and seat["state"] == "near"
    assert seat["windows"]["week"] == {
        "window": "2026-W48",
        "spent": 95,
        "ceiling": 100,
        "state": "near",
        "resets_at": "2026-11-30T00:00:00+00:00",
        "refused_at": None,
    }
    assert seat["windows"]["month"]["state"] == "ok"
    await b.charge(a, 5)
    assert (await b.snapshot())["refusing"] == [f"agent:{a}"]


async def test_reset_one_scope_or_all() -> None:
    b, coord, _h, _c, m = make(org={"day": 1000}, seats={"a": {"day": 100}, "b": {"month": 100}})
    a, bb = aid(m, "a"), aid(m, "b")
    await b.charge(a, 100)
    await b.charge(bb, 40)
    with pytest.raises(BudgetExhausted):
        await b.charge(a, 1)
    zeroed = await b.reset(f"agent:{a}")
    assert zeroed == [{"scope": f"agent:{a}", "period": "day", "window": "2026-11-29", "was": 100}]
    assert await b.refusal(a) is None
    assert await spent(coord, "org.day.2026-11-29") == 140
    assert await b.reset("agent:b") == [
        {"scope": f"agent:{bb}", "period": "month", "window": "2026-11", "was": 40}
    ]
    everything = await b.reset(None)  # every existing counter of every capped scope, org first
    assert [(z["scope"], z["period"], z["was"]) for z in everything] == [
        ("org", "day", 140),
        (f"agent:{a}", "day", 0),
        (f"agent:{bb}", "month", 0),
    ]
    assert await spent(coord, "org.day.2026-11-29") == 0
    for bad in ("agent:nobody", "seat:a", "agent:", "orgs"):
        with pytest.raises(UnknownScope, match="unknown budget scope"):
            await b.reset(bad)


async def test_a_store_that_is_down_is_unavailable_never_exhausted() -> None:
    from shared.coordination import FaultyCoordination

    model = org_of(company_data(org={"day": 1000}))
    b = Budgets(FaultyCoordination(), lambda: model)
    a = aid(model, "a")
    with pytest.raises(BudgetUnavailable) as caught:
        await b.charge(a, 1)
    assert not isinstance(caught.value, BudgetExhausted) and caught.value.retryable
    with pytest.raises(BudgetUnavailable):
        await b.refusal(a)
    with pytest.raises(BudgetUnavailable):
        await b.snapshot()
    with pytest.raises(BudgetUnavailable):
        await b.reset("org")
    not_open = Budgets(lambda: None, lambda: model)
    with pytest.raises(BudgetUnavailable, match="not open"):
        await not_open.charge(a, 1)


class SeatKeysDown(MemoryCoordination):
    """The org's keys answer; every write to a seat key fails as unknown."""

    async def update(self, slot: Any, key: str, value: bytes, *, revision: int) -> int:
        if key.startswith("agent-"):
            from shared.coordination import OutcomeUnknown

            raise OutcomeUnknown(f"{key}: write timed out; it may have landed")
        return await super().update(slot, key, value, revision=revision)


async def test_a_store_error_on_the_seat_takes_back_the_org() -> None:
    model = org_of(company_data(org={"day": 1000}, seats={"a": {"day": 100}}))
    coord = SeatKeysDown()
    b = Budgets(coord, lambda: model, clock=Clock())
    with pytest.raises(BudgetUnavailable, match="may have landed"):
        await b.charge(aid(model, "a"), 10)
    assert await spent(coord, "org.day.2026-11-29") == 0


async def test_garbage_in_a_counter_is_unavailable() -> None:
    b, coord, _h, _c, m = make(org={"day": 1000})
    await coord.put("budgets", "org.day.2026-11-29", b"not json")
    with pytest.raises(BudgetUnavailable, match="unreadable"):
        await b.charge(aid(m, "a"), 1)
    await coord.put("budgets", "org.day.2026-11-29", b'{"spent": "12"}')
    with pytest.raises(BudgetUnavailable, match="whole"):
        await b.snapshot()


async def test_negative_figures_are_refused() -> None:
    b, _coord, _h, _c, m = make(org={"day": 1000})
    with pytest.raises(ValueError, match="at least 0"):
        await b.charge(aid(m, "a"), -1)
    charge = await b.charge(aid(m, "a"), 1)
    with pytest.raises(ValueError, match="at least 0"):
        await b.settle(charge, -5)


async def test_the_reporter_logs_budget_reported_on_its_interval() -> None:
    b, _coord, _h, _c, m = make(org={"day": 1000}, report_interval=0.01)
    await b.charge(aid(m, "a"), 950)
    with structlog.testing.capture_logs() as logs:
        b.start()
        b.start()  # idempotent
        while len([r for r in logs if r["event"] == "budget_reported"]) < 3:
            import asyncio

            await asyncio.sleep(0.01)
        await b.stop()
        await b.stop()
    reported = [r for r in logs if r["event"] == "budget_reported"]
    assert reported[0]["org"] == {"day": {"spent": 950, "ceiling": 1000}}
    assert reported[0]["near"] == ["org"] and reported[0]["refusing"] == [] and reported[0]["scopes"] == 1
    assert reported[0]["log_level"] == "info"


async def test_the_reporter_survives_an_unreadable_store() -> None:
    from shared.coordination import FaultyCoordination

    model = org_of(company_data(org={"day": 1000}))
    b = Budgets(FaultyCoordination(), lambda: model)
    with structlog.testing.capture_logs() as logs:
        fields = await b.report()
    assert "coordination store unavailable" in fields["error"]
    assert [r["event"] for r in logs] == ["budget_reported"]
