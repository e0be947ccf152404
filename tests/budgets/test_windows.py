"""Window arithmetic on the company clock (CO-37): local day, ISO week from Monday, calendar month."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.budgets import window_of, windows_at


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def test_a_dst_free_zone_cuts_at_local_midnight() -> None:
    # Asia/Tokyo is UTC+9 all year: 2026-11-29 15:30Z is already the 30th there.
    w = window_of("day", utc(2026, 11, 29, 15, 30), "Asia/Tokyo")
    assert w.label == "2026-11-30"
    assert w.starts_at == utc(2026, 11, 29, 15, 0)
    assert w.resets_at == utc(2026, 11, 30, 15, 0)
    assert window_of("day", utc(2026, 11, 29, 14, 59, 59), "Asia/Tokyo").label == "2026-11-29"


def test_utc_day_week_month() -> None:
    wins = windows_at(utc(2026, 11, 29, 12), "UTC")  # a Sunday
    assert wins["day"].label == "2026-11-29" and wins["day"].resets_at == utc(2026, 11, 30)
    assert wins["week"].label == "2026-W48"
    assert wins["week"].starts_at == utc(2026, 11, 23) and wins["week"].resets_at == utc(2026, 11, 30)
    assert wins["month"].label == "2026-11"
    assert wins["month"].starts_at == utc(2026, 11, 1) and wins["month"].resets_at == utc(2026, 12, 1)


def test_the_spring_forward_day_is_23_hours() -> None:
    # Europe/Berlin leaves CET for CEST on 2026-03-29 at 02:00 local.
    w = window_of("day", utc(2026, 3, 29, 0, 30), "Europe/Berlin")
    assert w.label == "2026-03-29"
    assert w.starts_at == utc(2026, 3, 28, 23, 0)  # 00:00 CET
    assert w.resets_at == utc(2026, 3, 29, 22, 0)  # 00:00 CEST
    assert w.resets_at - w.starts_at == timedelta(hours=23)


def test_the_fall_back_day_is_25_hours_and_the_week_follows_local_mondays() -> None:
    w = window_of("day", utc(2026, 10, 25, 12), "Europe/Berlin")
    assert (w.label, w.resets_at - w.starts_at) == ("2026-10-25", timedelta(hours=25))
    week = window_of("week", utc(2026, 10, 25, 12), "Europe/Berlin")  # a Sunday in W43
    assert week.label == "2026-W43"
    assert week.starts_at == utc(2026, 10, 18, 22, 0)  # Monday 00:00 CEST
    assert week.resets_at == utc(2026, 10, 25, 23, 0)  # Monday 00:00 CET
    # the month that holds the change: October 1 CEST to November 1 CET
    month = window_of("month", utc(2026, 10, 25, 12), "Europe/Berlin")
    assert (month.starts_at, month.resets_at) == (utc(2026, 9, 30, 22), utc(2026, 10, 31, 23))


def test_a_midnight_skipped_by_dst_starts_the_day_at_the_transition() -> None:
    # America/Santiago springs forward at 24:00 on Saturday 2026-09-05: 00:00 on the 6th never exists.
    w = window_of("day", utc(2026, 9, 6, 12), "America/Santiago")
    assert w.label == "2026-09-06"
    assert w.starts_at == utc(2026, 9, 6, 4, 0)  # the transition instant, then 01:00 -03
    assert window_of("day", w.starts_at - timedelta(microseconds=1), "America/Santiago").label == "2026-09-05"
    assert window_of("day", utc(2026, 9, 5, 12), "America/Santiago").resets_at == w.starts_at


def test_iso_week_53_spans_the_new_year() -> None:
    # 2026 has 53 ISO weeks: Monday 2026-12-28 to Sunday 2027-01-03.
    for day in (utc(2026, 12, 28, 1), utc(2026, 12, 31, 23), utc(2027, 1, 1, 12), utc(2027, 1, 3, 23)):
        w = window_of("week", day, "UTC")
        assert (w.label, w.starts_at, w.resets_at) == ("2026-W53", utc(2026, 12, 28), utc(2027, 1, 4))
    assert window_of("week", utc(2027, 1, 4), "UTC").label == "2027-W01"
    assert window_of("week", utc(2025, 12, 29), "UTC").label == "2026-W01"  # ISO year before the calendar's


def test_month_rollover_in_december_and_in_a_zone_ahead() -> None:
    dec = window_of("month", utc(2026, 12, 31, 23, 59), "UTC")
    assert (dec.label, dec.resets_at) == ("2026-12", utc(2027, 1, 1))
    # 2026-12-31 23:30Z is already January in Tokyo
    jan = window_of("month", utc(2026, 12, 31, 23, 30), "Asia/Tokyo")
    assert (jan.label, jan.starts_at, jan.resets_at) == (
        "2027-01",
        utc(2026, 12, 31, 15),
        utc(2027, 1, 31, 15),
    )
    feb = window_of("month", utc(2028, 2, 29, 12), "UTC")  # a leap February
    assert (feb.label, feb.resets_at) == ("2028-02", utc(2028, 3, 1))


def test_bad_input_is_the_callers_mistake() -> None:
    with pytest.raises(ValueError, match="aware"):
        window_of("day", datetime(2026, 1, 1), "UTC")
    with pytest.raises(ValueError, match="unknown budget period"):
        window_of("year", utc(2026, 1, 1), "UTC")  # type: ignore[arg-type]
