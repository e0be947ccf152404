"""Slot arithmetic of schedules in UTC instants (CO-33); see :mod:`shared.schedules`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

__all__ = [
    "FIRES_AGE",
    "ScheduleRef",
    "catchup_window",
    "claim_key",
    "fire_label",
    "is_repeat",
    "next_slot",
    "prev_slot",
    "schedules_of",
    "slots_between",
    "utc_instant",
]

FIRES_AGE = timedelta(days=7)
"""How long the ``fires`` bucket keeps a claim (FL-125); a scheduler window never reaches back further."""
_CRON_PAD = timedelta(minutes=1)
"""croniter starts this far before a window's start; results are filtered by instant, so the pad
only costs a step. (Checked: across both 2026 America/New_York changes, windows of 10 s, 37 s and
7 min give the same slots as one window over the night, with or without a 2 h pad.)"""


@dataclass(frozen=True)
class ScheduleRef:
    """One schedule of the org with its scope and target seats (FL-93).

    Attributes:
        scope_type: ``role`` or ``unit``.
        scope_id: The role's handle or the unit's id.
        schedule: The document entry (:class:`shared.config.Schedule` / ``UnitSchedule``).
        targets: Agent seat handles that receive the fire, in org order (empty: nobody to run it).
        zone: The IANA zone the cron line is read in (:meth:`Company.schedule_timezone`).
    """

    scope_type: str
    scope_id: str
    schedule: Any
    targets: tuple[str, ...]
    zone: str

    @property
    def name(self) -> str:
        """The schedule's name."""
        return str(self.schedule.name)


def utc_instant(value: datetime, name: str) -> datetime:
    """Return ``value`` as an aware UTC datetime.

    Raises:
        ValueError: ``value`` is not a timezone-aware datetime; the message names ``name``.
    """
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name}: must be a timezone-aware datetime (got {value!r})")
    return value.astimezone(UTC)


def claim_key(scope_type: str, scope_id: str, name: str, label: str, target: str) -> str:
    """Return the ``fires`` key of one slot of one schedule for one seat, ``fire.<40 hex>``.

    The identity is ``(scope_type, scope_id, schedule_name, fire_label, target_handle)`` (CO-33),
    hashed because KV keys allow a narrow alphabet.
    """
    ident = "|".join((scope_type, scope_id, name, label, target))
    return "fire." + hashlib.sha256(ident.encode()).hexdigest()[:40]


def fire_label(instant: datetime, zone: ZoneInfo) -> str:
    """Return the local wall clock of ``instant`` (aware) in ``zone`` as ``YYYYmmddTHHMM``."""
    return utc_instant(instant, "instant").astimezone(zone).strftime("%Y%m%dT%H%M")


def schedules_of(org: Any) -> list[ScheduleRef]:
    """Every schedule of the org (:class:`shared.config.OrgModel`) with scope, targets and zone.

    Role schedules first (run as that seat), then unit schedules depth-first (``target: each`` =
    every direct agent role of the unit, ``lead`` = its effective lead); human seats never receive
    a fire (FL-93: the list comes from the org, not from this node's seats).
    """
    out: list[ScheduleRef] = []
    company = org.company
    agents = {s.handle for s in org.seats}
    for seat in org.seats:
        for sched in seat.role.schedules:
            out.append(
                ScheduleRef("role", seat.handle, sched, (seat.handle,), company.schedule_timezone(sched))
            )
    for unit in org.units:
        for sched in unit.unit.schedules:
            if sched.target == "lead":
                targets = [unit.effective_lead] if unit.effective_lead else []
            else:
                targets = list(unit.roles)
            out.append(
                ScheduleRef(
                    "unit",
                    unit.id,
                    sched,
                    tuple(t for t in targets if t in agents),
                    company.schedule_timezone(sched),
                )
            )
    return out


def is_repeat(instant: datetime, zone: ZoneInfo) -> bool:
    """True when ``instant`` (aware) is the second occurrence of a wall time repeated by a fall-back."""
    instant = utc_instant(instant, "instant")
    wall = instant.astimezone(zone)
    return wall.fold == 1 and wall.replace(fold=0).astimezone(UTC) != instant


def slots_between(cron: str, zone: ZoneInfo, since: datetime, until: datetime) -> list[datetime]:
    """Return the cron slots in ``(since, until]`` as aware UTC instants, oldest first.

    The second occurrence of a repeated wall time is dropped (one fire per local minute).

    Args:
        cron: Five cron fields.
        zone: The zone the fields are read in.
        since: Window start, exclusive (aware).
        until: Window end, inclusive (aware).

    Raises:
        ValueError: a naive ``since``/``until``.
    """
    since, until = utc_instant(since, "since"), utc_instant(until, "until")
    if until <= since:
        return []
    it = croniter(cron, (since - _CRON_PAD).astimezone(zone))
    # a cron line fires at most once a minute: this bounds the walk even if croniter stalled
    budget = int((until - since + _CRON_PAD).total_seconds() // 60) + 10
    out: list[datetime] = []
    for _ in range(budget):
        try:
            instant: datetime = it.get_next(datetime).astimezone(UTC)
        except CroniterBadDateError:
            break  # a line that never matches again (``0 0 30 2 *``)
        if instant > until:
            break
        if instant <= since or (out and instant <= out[-1]) or is_repeat(instant, zone):
            continue
        out.append(instant)
    return out


def next_slot(cron: str, zone: ZoneInfo, after: datetime) -> datetime | None:
    """Return the first slot strictly after ``after`` (aware) as aware UTC, a repeated wall time
    skipped; None for a line that never matches (``0 0 30 2 *``)."""
    after = utc_instant(after, "after")
    it = croniter(cron, (after - _CRON_PAD).astimezone(zone))
    try:
        while True:
            instant: datetime = it.get_next(datetime).astimezone(UTC)
            if instant > after and not is_repeat(instant, zone):
                return instant
    except CroniterBadDateError:
        return None


def prev_slot(cron: str, zone: ZoneInfo, at: datetime) -> datetime | None:
    """Return the last slot at or before ``at`` (aware) as aware UTC, a repeated wall time skipped;
    None for a line that never matched."""
    at = utc_instant(at, "at")
    it = croniter(cron, (at + timedelta(minutes=1)).astimezone(zone))
    try:
        while True:
            instant: datetime = it.get_prev(datetime).astimezone(UTC)
            if instant <= at and not is_repeat(instant, zone):
                return instant
    except CroniterBadDateError:
        return None


def catchup_window(cron: str, zone: ZoneInfo, slot: datetime, scheduling: Any) -> float:
    """Return the catch-up window of ``slot`` in seconds: half the period, clamped (CO-33).

    The period is the UTC distance from the slot before ``slot`` to ``slot`` (at least 60 s); the
    clamp is ``[scheduling.catchup_min_seconds, scheduling.catchup_max_seconds]``.
    """
    slot = utc_instant(slot, "slot")
    try:
        prev: datetime = croniter(cron, slot.astimezone(zone)).get_prev(datetime).astimezone(UTC)
    except CroniterBadDateError:  # no slot before this one: the widest window
        return float(scheduling.catchup_max_seconds)
    half = max((slot - prev).total_seconds(), 60.0) / 2
    return float(min(max(half, scheduling.catchup_min_seconds), scheduling.catchup_max_seconds))
