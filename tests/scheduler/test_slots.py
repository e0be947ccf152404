"""Pure slot arithmetic and tick plans on a frozen clock (CO-33): UTC instants, DST, the catch-up rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from services.workers.scheduler import due_fires, plan_tick
from shared.config import OrgModel, inert_paths, validate_company_data
from shared.schedules import catchup_window, fire_label, next_slot, prev_slot, schedules_of, slots_between

from .conftest import company_data, every, org_of

NY = ZoneInfo("America/New_York")
TICK = timedelta(seconds=10)


def _run(org: OrgModel, ticks: list[datetime]) -> list[tuple[str, datetime]]:
    """Plan ticks back to back (the first a start); return (label, instant) of every due fire."""
    out: list[tuple[str, datetime]] = []
    last = None
    for now in ticks:
        out += [(f.label, f.at) for f in plan_tick(org, since=last, until=now, tick=TICK).due]
        last = now
    return out


def test_schedules_are_not_inert_any_more() -> None:
    data = company_data(
        [{"name": "pulse", "cron": "*/5 * * * *", "task": "t"}],
        unit_schedules=[{"name": "standup", "cron": "0 9 * * 1-5", "task": "t"}],
        scheduling={"tick_seconds": 5},
    )
    company, issues = validate_company_data(data)
    assert company is not None, issues
    assert not [p for p in inert_paths(company) if "schedul" in p]


def test_a_schedule_on_a_human_role_is_refused_naming_it() -> None:
    # the tryout's case: it validated, then vanished from GET /schedules and never fired
    data = company_data([])
    data["units"][0]["roles"][2]["schedules"] = [{"name": "pulse", "cron": "0 9 * * *", "task": "t"}]
    company, issues = validate_company_data(data)
    assert company is None
    [issue] = [i for i in issues if i.path.endswith("schedules")]
    assert issue.path == "units[0].roles[2].schedules" and "human seat runs no turns" in issue.message


def test_unit_targets_each_agent_role_or_the_lead_never_a_human() -> None:
    org = org_of(
        company_data(
            [],
            unit_schedules=[
                {"name": "standup", "cron": "0 9 * * *", "task": "t"},
                {"name": "review", "cron": "0 17 * * *", "task": "t", "target": "lead"},
            ],
        )
    )
    refs = {r.name: r for r in schedules_of(org)}
    assert refs["standup"].targets == ("lead", "dev") and refs["standup"].scope_id == "eng"
    assert refs["review"].targets == ("lead",)


def test_spring_slot_in_the_skipped_hour_fires_once_at_the_transition() -> None:
    # 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z): 02:30 does not exist that day
    org = org_of(company_data([{"name": "night", "cron": "30 2 * * *", "task": "t"}], tz="America/New_York"))
    ticks = every(datetime(2026, 3, 8, 6, 0, tzinfo=UTC), datetime(2026, 3, 8, 9, 0, tzinfo=UTC))
    assert _run(org, ticks) == [("20260308T0300", datetime(2026, 3, 8, 7, 0, tzinfo=UTC))]
    # the day before and after, 02:30 local as usual
    assert slots_between("30 2 * * *", NY, ticks[0] - timedelta(days=1), ticks[-1] + timedelta(days=1)) == [
        datetime(2026, 3, 7, 7, 30, tzinfo=UTC),
        datetime(2026, 3, 8, 7, 0, tzinfo=UTC),
        datetime(2026, 3, 9, 6, 30, tzinfo=UTC),
    ]


def test_autumn_repeated_wall_time_fires_once_never_early() -> None:
    # 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z): 01:30 happens at 05:30Z and again at 06:30Z
    org = org_of(company_data([{"name": "night", "cron": "30 1 * * *", "task": "t"}], tz="America/New_York"))
    ticks = every(datetime(2026, 11, 1, 4, 0, tzinfo=UTC), datetime(2026, 11, 1, 8, 0, tzinfo=UTC))
    fired = _run(org, ticks)
    assert fired == [("20261101T0130", datetime(2026, 11, 1, 5, 30, tzinfo=UTC))]
    # it is published by the first tick at or after its instant, never before
    first = next(t for t in ticks if t >= fired[0][1])
    assert plan_tick(org, since=first - TICK, until=first, tick=TICK).due[0].at <= first
    assert plan_tick(org, since=first - 2 * TICK, until=first - TICK, tick=TICK).due == []


def test_autumn_catchup_off_first_tick_at_the_second_0140_fires_nothing_early_or_late() -> None:
    org = org_of(
        company_data(
            [{"name": "night", "cron": "30 1 * * *", "task": "t", "catchup": False}], tz="America/New_York"
        )
    )
    second_0140 = datetime(2026, 11, 1, 6, 40, tzinfo=UTC)
    assert second_0140.astimezone(NY).strftime("%H:%M%z") == "01:40-0500"
    plan = plan_tick(org, since=None, until=second_0140, tick=TICK)
    assert plan.due == []  # the 05:30Z slot was missed: skipped, not fired 70 minutes late
    assert [(s.reason, s.labels()) for s in plan.skipped] == [("catchup_off", ["20261101T0130"])]
    # ticking on from there: nothing until the next day's 01:30 EST, fired on time
    ticks = every(second_0140, datetime(2026, 11, 2, 6, 31, tzinfo=UTC), 60.0)
    fired = _run(org, ticks)
    assert fired == [("20261102T0130", datetime(2026, 11, 2, 6, 30, tzinfo=UTC))]


def test_autumn_node_back_at_the_second_0140_does_not_miss_the_days_slot() -> None:
    org = org_of(company_data([{"name": "night", "cron": "30 1 * * *", "task": "t"}], tz="America/New_York"))
    second_0140 = datetime(2026, 11, 1, 6, 40, tzinfo=UTC)
    fires = due_fires(org, since=None, until=second_0140, first=True, tick=TICK)
    assert [(f.label, f.at, f.catchup) for f in fires] == [
        ("20261101T0130", datetime(2026, 11, 1, 5, 30, tzinfo=UTC), True)
    ]
    # the same after a gap on a node that stayed up (last evaluated before the first 01:30)
    fires = due_fires(org, since=datetime(2026, 11, 1, 5, 0, tzinfo=UTC), until=second_0140, tick=TICK)
    assert [f.label for f in fires] == ["20261101T0130"]


def test_one_fire_per_local_minute_across_both_changes() -> None:
    org = org_of(
        company_data(
            [
                {"name": "five", "cron": "*/5 * * * *", "task": "t"},
                {"name": "hourly", "cron": "0 * * * *", "task": "t"},
            ],
            tz="America/New_York",
        )
    )
    for start in (datetime(2026, 3, 8, 5, 0, tzinfo=UTC), datetime(2026, 11, 1, 4, 0, tzinfo=UTC)):
        ticks = every(start, start + timedelta(hours=4), 30.0)
        last = None
        fired: list[tuple[str, str]] = []
        for now in ticks:
            fired += [(f.name, f.label) for f in plan_tick(org, since=last, until=now, tick=TICK).due]
            last = now
        assert len(fired) == len(set(fired)), fired  # no local minute twice per schedule
    # the autumn night: 4 UTC hours hold 3 local hours (01:xx happens twice, fires once)
    assert [lbl for name, lbl in fired if name == "hourly"] == [
        "20261101T0000",
        "20261101T0100",
        "20261101T0200",
        "20261101T0300",
    ]
    assert len([1 for name, _ in fired if name == "five"]) == 3 * 12 + 1


def test_catchup_window_is_half_the_period_clamped() -> None:
    org = org_of(company_data([], scheduling={"catchup_min_seconds": 120, "catchup_max_seconds": 7200}))
    s = org.company.scheduling
    at = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert catchup_window("*/5 * * * *", ZoneInfo("UTC"), at, s) == 150
    assert catchup_window("* * * * *", ZoneInfo("UTC"), at, s) == 120
    assert catchup_window("0 12 * * *", ZoneInfo("UTC"), at, s) == 7200


def test_next_and_prev_slots_are_utc_instants_with_local_labels() -> None:
    after = datetime(2026, 11, 1, 5, 31, tzinfo=UTC)
    nxt = next_slot("30 1 * * *", NY, after)
    assert nxt == datetime(2026, 11, 2, 6, 30, tzinfo=UTC) and fire_label(nxt, NY) == "20261102T0130"
    assert prev_slot("30 1 * * *", NY, datetime(2026, 11, 1, 6, 40, tzinfo=UTC)) == datetime(
        2026, 11, 1, 5, 30, tzinfo=UTC
    )


def test_naive_instants_are_refused_naming_the_field() -> None:
    org = org_of(company_data([{"name": "p", "cron": "*/5 * * * *", "task": "t"}]))
    with pytest.raises(ValueError, match="until: must be a timezone-aware datetime"):
        plan_tick(org, since=None, until=datetime(2026, 1, 1, 12, 0))
    with pytest.raises(ValueError, match="since: must be a timezone-aware"):
        plan_tick(org, since=datetime(2026, 1, 1), until=datetime(2026, 1, 1, 12, 0, tzinfo=UTC))


def test_a_line_that_never_matches_fires_nothing_and_breaks_no_other_schedule() -> None:
    org = org_of(
        company_data(
            [
                {"name": "never", "cron": "0 0 30 2 *", "task": "t"},
                {"name": "pulse", "cron": "*/5 * * * *", "task": "t"},
            ]
        )
    )
    now = datetime(2026, 11, 30, 9, 0, 5, tzinfo=UTC)
    assert [f.name for f in plan_tick(org, since=None, until=now).due] == ["pulse"]
    utc = ZoneInfo("UTC")
    assert next_slot("0 0 30 2 *", utc, now) is None and prev_slot("0 0 30 2 *", utc, now) is None


def test_a_fire_is_marked_catchup_only_when_it_is_late() -> None:
    # the tryout's case: a catchup: false schedule fired on time at a first boot read "catchup: true"
    org = org_of(
        company_data(
            [
                {"name": "on", "cron": "*/5 * * * *", "task": "t"},
                {"name": "off", "cron": "*/5 * * * *", "task": "t", "catchup": False},
            ]
        )
    )
    slot = datetime(2026, 11, 30, 9, 5, tzinfo=UTC)
    fresh = plan_tick(org, since=None, until=slot + timedelta(seconds=2), tick=TICK)
    assert sorted((f.name, f.catchup) for f in fresh.due) == [("off", False), ("on", False)]
    late = plan_tick(org, since=None, until=slot + timedelta(minutes=2), tick=TICK)
    assert [(f.name, f.catchup) for f in late.due] == [("on", True)]
