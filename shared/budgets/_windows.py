"""Budget windows on the company clock (CO-37).

A window is cut in the company ``timezone``: ``day`` is the local date (local midnight to local
midnight, 23 or 25 hours across a DST change), ``week`` the ISO week (Monday to Monday, labelled
with the ISO year, so 2027-01-01 falls in ``2026-W53``), ``month`` the calendar month. A window's
label names it in counter keys; ``resets_at`` is the instant the next window starts, aware UTC.

A local midnight that a DST change skips (a zone that springs forward at 00:00) starts the day at
the transition instant, the first instant that reads as the new date.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

__all__ = ["PERIODS", "Period", "Window", "window_of", "windows_at"]

Period = Literal["day", "week", "month"]
PERIODS: tuple[Period, ...] = ("day", "week", "month")


@dataclass(frozen=True)
class Window:
    """One budget window.

    Attributes:
        period: ``day``, ``week`` or ``month``.
        label: ``2026-11-29``, ``2026-W48`` or ``2026-11``: the window's name in counter keys.
        starts_at: The window's first instant, aware UTC.
        resets_at: The next window's first instant, aware UTC.
    """

    period: Period
    label: str
    starts_at: datetime
    resets_at: datetime


def _local_midnight(day: date, zone: ZoneInfo) -> datetime:
    # fold=0 on a skipped midnight reads with the offset before the change, which lands exactly on
    # the transition instant: the first instant of the new local date.
    return datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)


def window_of(period: Period, at: datetime, timezone: str) -> Window:
    """Return the ``period`` window holding the instant ``at`` on the company clock (CO-37).

    Args:
        period: ``day``, ``week`` or ``month``.
        at: An aware instant (any zone).
        timezone: The company ``timezone``, an IANA zone name.

    Returns:
        The window, its bounds aware UTC.

    Raises:
        ValueError: ``at`` is naive or ``period`` is not one of :data:`PERIODS`.
        zoneinfo.ZoneInfoNotFoundError: ``timezone`` is not a known zone (a validated company
            never has one).
    """
    if at.tzinfo is None:
        raise ValueError("window_of needs an aware datetime")
    zone = ZoneInfo(timezone)
    today = at.astimezone(zone).date()
    if period == "day":
        start, nxt, label = today, today + timedelta(days=1), today.isoformat()
    elif period == "week":
        iso = today.isocalendar()
        start = today - timedelta(days=today.weekday())
        nxt, label = start + timedelta(days=7), f"{iso.year}-W{iso.week:02d}"
    elif period == "month":
        start = today.replace(day=1)
        nxt = date(start.year + 1, 1, 1) if start.month == 12 else date(start.year, start.month + 1, 1)
        label = f"{start.year:04d}-{start.month:02d}"
    else:
        raise ValueError(f"unknown budget period {period!r}; expected one of {', '.join(PERIODS)}")
    return Window(period, label, _local_midnight(start, zone), _local_midnight(nxt, zone))


def windows_at(at: datetime, timezone: str) -> dict[Period, Window]:
    """Return the current ``day``, ``week`` and ``month`` windows at ``at`` (see :func:`window_of`)."""
    return {p: window_of(p, at, timezone) for p in PERIODS}
