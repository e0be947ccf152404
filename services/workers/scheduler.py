"""The scheduler tick (CO-33), run under the ``worker:scheduler`` duty lease (FL-91..FL-93, FL-97, FL-125).

The work list comes from the org, never from this node's seats (FL-93: a workers node holds no
seats): every ``schedules`` entry on a role (run as that seat) and on a unit (``target: each`` =
every direct agent role, ``lead`` = the unit's effective lead). Cron uses croniter (five fields,
Vixie day semantics) in the schedule's time zone (:meth:`Company.schedule_timezone`).

**Slots are instants.** Every slot is taken from croniter's zone-aware answer and compared as a
UTC instant, never as a local wall time (local arithmetic on aware datetimes ignores ``fold``). The
fire label stays the local wall clock ``YYYYmmddTHHMM``. At the autumn change a wall time that
happens twice fires once, at its *first* instant (the repeat is dropped, as Vixie cron does); at
the spring change a slot inside the skipped hour fires once, at the transition (croniter moves it
to the first valid minute, e.g. ``30 2 * * *`` → 03:00 local, labelled ``...T0300``). So one fire
per local minute.

**The window.** The :class:`Scheduler` remembers the last instant it evaluated; each tick looks at
the slots in ``(last, now]``. A tick is *regular* when ``now - last`` is at most
:data:`ON_TIME_TICKS` × ``tick_seconds`` + :data:`ON_TIME_SLACK` seconds: every slot in the window
fires. Otherwise it is a *catch-up* tick — the first tick of this object (a start, a restart, the
duty won), or any tick after a gap (the duty lost and regained, a broker outage that failed ticks,
a shed node, a stalled loop): per schedule and target at most one fire, the single most recent
missed slot, and only when it lies within half the period (the distance to the slot before it,
in UTC) clamped to ``[catchup_min_seconds, catchup_max_seconds]``; a ``catchup: false`` schedule
fires it only when it is on time (within the regular allowance), never late. Every other slot of
the window is recorded ``skipped_catchup``: a ``skipped`` claim in ``fires`` (so a peer does not
fire it; at most :data:`MAX_SKIP_CLAIMS` per schedule and target per tick, the most recent) and
one log line ``skipped_catchup{schedule, seat, fire_label, oldest_label, count, unchecked,
reason}``. With no previous instant the window reaches back
``catchup_max_seconds`` + the allowance and records as skipped only the slots inside the catch-up
window (older ones are unknown history, not a skip); a window never reaches back further than the
``fires`` bucket keeps claims (7 days).

**At most once.** A due fire is claimed first-writer-wins in ``fires`` (7 days) under
``(scope_type, scope_id, schedule_name, fire_label, target)``, so it is at most once fleet-wide
even when two holders overlap or the duty moves mid-window (FL-125). A claim that cannot be made
(:class:`CoordinationUnavailable`) ends the tick without moving the window: the next tick
retries (fails closed). A claim whose outcome is unknown is remembered and, when the next tick finds
it taken, compared with what this scheduler wrote. Then ``publish(handle, fire)`` puts a
``task_assigned`` on the seat's inbox and ``scheduled_task_fired`` is logged; a publish that fails
gives the claim back (deletes it) and ends the tick, so the next tick retries (the inbox publish is
deduplicated on the claim key).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from shared import logs
from shared.coordination import (
    Coordination,
    CoordinationError,
    CoordinationUnavailable,
    OutcomeUnknown,
    RevisionConflict,
)
from shared.schedules import (
    FIRES_AGE,
    ScheduleRef,
    catchup_window,
    claim_key,
    fire_label,
    schedules_of,
    slots_between,
    utc_instant,
)

__all__ = [
    "FIRES_AGE",
    "MAX_SKIP_CLAIMS",
    "ON_TIME_SLACK",
    "ON_TIME_TICKS",
    "Fire",
    "Plan",
    "ScheduleRef",
    "Scheduler",
    "Skipped",
    "due_fires",
    "plan_tick",
]

_log = logs.get("workers.scheduler")

ON_TIME_TICKS = 2
"""A slot seen within this many ``tick_seconds`` (plus :data:`ON_TIME_SLACK`) of its instant is on time."""
ON_TIME_SLACK = 5.0
"""Seconds added to the on-time allowance (a tick's own run time and the lease claim)."""
MAX_SKIP_CLAIMS = 100
"""At most this many ``skipped`` claims per schedule and target per tick (the most recent ones)."""


@dataclass(frozen=True)
class Fire:
    """One due fire of one schedule for one seat.

    Attributes:
        scope_type: ``role`` or ``unit``.
        scope_id: The role's handle or the unit's id.
        name: The schedule name.
        target: The seat handle that runs it.
        task: The task text.
        at: The slot's instant, aware UTC.
        label: The slot's local wall clock, ``YYYYmmddTHHMM``.
        timeout_seconds: Wall-clock cap of the scheduled turn, seconds (CO-33; the turn fails
            ``scheduled_timeout`` past it).
        catchup: True when this fire is late: a catch-up tick fired a slot older than the
            on-time allowance (a slot due within it is on time on any tick).
        zone: The zone of the label.
    """

    scope_type: str
    scope_id: str
    name: str
    target: str
    task: str
    at: datetime
    label: str
    timeout_seconds: float
    catchup: bool = False
    zone: str = "UTC"

    @property
    def claim_key(self) -> str:
        """The ``fires`` bucket key (:func:`shared.schedules.claim_key`)."""
        return claim_key(self.scope_type, self.scope_id, self.name, self.label, self.target)


@dataclass(frozen=True)
class Skipped:
    """Slots of one schedule and target a tick does not fire (``skipped_catchup``).

    Attributes:
        scope_type: ``role`` or ``unit``.
        scope_id: The role's handle or the unit's id.
        name: The schedule name.
        target: The seat handle.
        slots: The skipped instants, aware UTC, oldest first.
        zone: The zone of their labels.
        reason: ``older`` (older than the missed slot caught up), ``outside_window`` (the most
            recent missed slot is older than the catch-up window), ``catchup_off`` (a missed slot
            of a ``catchup: false`` schedule).
    """

    scope_type: str
    scope_id: str
    name: str
    target: str
    slots: tuple[datetime, ...]
    zone: str
    reason: str

    def labels(self) -> list[str]:
        """The slots' local wall-clock labels, oldest first."""
        tz = ZoneInfo(self.zone)
        return [fire_label(s, tz) for s in self.slots]


@dataclass
class Plan:
    """What one tick does.

    Attributes:
        since: The start of the window (exclusive), aware UTC.
        until: Its end (inclusive), aware UTC.
        catchup: True for a catch-up tick (first tick or after a gap).
        due: Fires to claim and publish, in slot order per schedule.
        skipped: Slots recorded ``skipped_catchup``.
    """

    since: datetime
    until: datetime
    catchup: bool
    due: list[Fire] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def _allowance(tick: timedelta) -> float:
    return ON_TIME_TICKS * tick.total_seconds() + ON_TIME_SLACK


def plan_tick(org: Any, *, since: datetime | None, until: datetime, tick: timedelta | None = None) -> Plan:
    """Decide what one tick fires and skips (CO-33); pure, no store.

    Args:
        org: The org model.
        since: The last instant evaluated (aware), or None when there is none (a start).
        until: Now (aware).
        tick: The tick interval; default ``scheduling.tick_seconds``.

    Returns:
        The :class:`Plan`: regular when ``until - since`` is within the on-time allowance, else
        catch-up (see the module text).

    Raises:
        ValueError: a naive ``since``/``until``.
    """
    settings = org.company.scheduling
    until = utc_instant(until, "until")
    tick = tick if tick is not None else timedelta(seconds=settings.tick_seconds)
    allow = _allowance(tick)
    floor = until - FIRES_AGE
    if since is None:
        start = until - timedelta(seconds=settings.catchup_max_seconds + allow)
        catchup = True
    else:
        start = utc_instant(since, "since")
        catchup = (until - start).total_seconds() > allow
    start = max(start, floor)
    plan = Plan(since=start, until=until, catchup=catchup)
    for ref in schedules_of(org):
        sched = ref.schedule
        if not sched.enabled or not ref.targets:
            continue
        zone = ZoneInfo(ref.zone)
        slots = slots_between(sched.cron, zone, start, until)
        if not slots:
            continue
        due: list[datetime] = slots
        skipped: list[tuple[tuple[datetime, ...], str]] = []
        if catchup:
            last = slots[-1]
            window = max(catchup_window(sched.cron, zone, last, settings), allow)
            limit = window if sched.catchup else allow
            if since is None:
                # a start: what lies before the catch-up window is unknown history, not "skipped"
                slots = [t for t in slots if (until - t).total_seconds() <= window]
                if not slots:
                    continue
            if (until - last).total_seconds() <= limit:
                due = [last]
                reason = "older" if sched.catchup else "catchup_off"
                if len(slots) > 1:
                    skipped.append((tuple(slots[:-1]), reason))
            else:
                due = []
                skipped.append((tuple(slots), "outside_window" if sched.catchup else "catchup_off"))
        for target in ref.targets:
            for instant in due:
                plan.due.append(
                    Fire(
                        ref.scope_type,
                        ref.scope_id,
                        ref.name,
                        target,
                        sched.task,
                        instant,
                        fire_label(instant, zone),
                        sched.timeout_seconds,
                        # a slot fired late; one due within the on-time allowance is on time even
                        # on a catch-up tick (a start), as for a ``catchup: false`` schedule
                        catchup=catchup and (until - instant).total_seconds() > allow,
                        zone=ref.zone,
                    )
                )
            for group, why in skipped:
                plan.skipped.append(
                    Skipped(ref.scope_type, ref.scope_id, ref.name, target, group, ref.zone, why)
                )
    return plan


def due_fires(
    org: Any, *, since: datetime | None, until: datetime, first: bool = False, tick: timedelta | None = None
) -> list[Fire]:
    """Return the fires one tick over ``(since, until]`` publishes (CO-33); see :func:`plan_tick`.

    Args:
        org: The org model.
        since: The previous tick (aware), or None for a start.
        until: Now (aware).
        first: True for the first tick after start (``since`` is then ignored).
        tick: The tick interval; default ``scheduling.tick_seconds``.
    """
    return plan_tick(org, since=None if first else since, until=until, tick=tick).due


class _Stop(Exception):
    """The store could not be asked: end the tick, keep the window open."""


class Scheduler:
    """Evaluates schedules on each tick the duty lease allows (CO-33, FL-97, FL-125).

    Args:
        coord: The coordination store (the ``fires`` bucket).
        publish: Puts a ``task_assigned`` on a seat's inbox: ``await publish(handle, fire)``;
            any exception is a failed publish.
        holder: Written into each claim (who claimed); default a fresh random id.

    Attributes:
        coord: The store the claims go to (replaceable: a node swaps it when it reopens one).
        last_plan: The plan of the last tick that ran, or None.
    """

    def __init__(
        self,
        coord: Coordination,
        publish: Callable[[str, Fire], Awaitable[None]],
        *,
        holder: str | None = None,
    ) -> None:
        self.coord = coord
        self._publish = publish
        self._holder = holder or uuid.uuid4().hex
        self._last: datetime | None = None
        self._pending: dict[str, tuple[bytes, datetime]] = {}  # claims whose create outcome was unknown
        self.last_plan: Plan | None = None

    @property
    def last_evaluated(self) -> datetime | None:
        """The last instant a tick finished evaluating (aware UTC), or None before the first."""
        return self._last

    def skip_to(self, now: datetime) -> None:
        """Move the window's start to ``now`` without firing (scheduling disabled meanwhile)."""
        self._last = utc_instant(now, "now")

    async def tick(self, org: Any, *, now: datetime | None = None) -> list[Fire]:
        """Fire what came due since the last evaluated instant; return the fires published.

        A tick that cannot reach the store keeps the window open: the next tick evaluates from
        the same instant (and, after a gap, catches up by the rule).

        Args:
            org: The org model.
            now: The instant to evaluate up to (aware); default the wall clock.

        Raises:
            ValueError: a naive ``now``.
        """
        now = utc_instant(now if now is not None else datetime.now(UTC), "now")
        if self._last is not None and now <= self._last:
            return []  # the clock went back (or stood still): nothing new is due
        # off the event loop: after a long gap the slot walk is CPU work (7 days of a per-minute
        # line is ~0.4 s per schedule)
        plan = await asyncio.to_thread(plan_tick, org, since=self._last, until=now)
        self.last_plan = plan
        for key, (_, at) in list(self._pending.items()):
            if at < now - FIRES_AGE:
                del self._pending[key]
        published: list[Fire] = []
        try:
            for fire in plan.due:
                if await self._fire(fire):
                    published.append(fire)
            for skip in plan.skipped:
                await self._skip(skip)
        except _Stop:
            return published  # fails closed: the window stays open for the next tick
        self._last = now
        return published

    def _claim(
        self, state: str, scope_type: str, scope_id: str, name: str, target: str, at: datetime
    ) -> bytes:
        return json.dumps(
            {
                "state": state,
                "scope": f"{scope_type}:{scope_id}",
                "schedule": name,
                "seat": target,
                "at": at.isoformat(),
                "by": self._holder,
            },
            sort_keys=True,
        ).encode()

    async def _fire(self, fire: Fire) -> bool:
        key = fire.claim_key
        value = self._claim("fired", fire.scope_type, fire.scope_id, fire.name, fire.target, fire.at)
        try:
            revision = await self.coord.create("fires", key, value)
        except RevisionConflict:
            mine = self._pending.pop(key, None)
            if mine is None:
                return False  # fired (or skipped) already, by this node or a peer
            try:
                entry = await self.coord.get("fires", key)
            except CoordinationUnavailable as e:
                self._pending[key] = mine
                self._unknown(fire, e)
                raise _Stop from e
            if entry is None or entry.value != mine[0]:
                return False
            revision = entry.revision  # the write whose answer was lost did land: it is ours
        except OutcomeUnknown as e:
            self._pending[key] = (value, fire.at)
            self._unknown(fire, e)
            raise _Stop from e
        except CoordinationUnavailable as e:
            self._unknown(fire, e)
            raise _Stop from e
        try:
            await self._publish(fire.target, fire)
        except Exception as e:  # noqa: BLE001 - any publish failure gives the slot back
            error = f"{type(e).__name__}: {e}"
            try:
                await self.coord.delete("fires", key, revision=revision)
                _log.warning(
                    "scheduled_fire_failed",
                    schedule=fire.name,
                    seat=fire.target,
                    fire_label=fire.label,
                    error=error,
                )
            except CoordinationError as de:
                _log.error(
                    "scheduled_fire_lost",
                    schedule=fire.name,
                    seat=fire.target,
                    fire_label=fire.label,
                    error=error,
                    release_error=str(de),
                )
            raise _Stop from e
        _log.info(
            "scheduled_task_fired",
            schedule=fire.name,
            seat=fire.target,
            scope=f"{fire.scope_type}:{fire.scope_id}",
            fire_label=fire.label,
            at=fire.at.isoformat(),
            catchup=fire.catchup,
        )
        return True

    def _unknown(self, fire: Fire, e: Exception) -> None:
        _log.warning(
            "schedule_claim_unknown",
            schedule=fire.name,
            seat=fire.target,
            fire_label=fire.label,
            error=str(e),
        )

    async def _skip(self, skip: Skipped) -> None:
        checked = skip.slots[-MAX_SKIP_CLAIMS:]
        unchecked = len(skip.slots) - len(checked)
        recorded = 0
        zone = ZoneInfo(skip.zone)
        for at in checked:
            label = fire_label(at, zone)
            key = claim_key(skip.scope_type, skip.scope_id, skip.name, label, skip.target)
            value = self._claim("skipped", skip.scope_type, skip.scope_id, skip.name, skip.target, at)
            try:
                await self.coord.create("fires", key, value)
            except RevisionConflict:
                continue  # fired or skipped already
            except CoordinationUnavailable as e:
                _log.warning(
                    "schedule_claim_unknown",
                    schedule=skip.name,
                    seat=skip.target,
                    fire_label=label,
                    error=str(e),
                )
                raise _Stop from e
            recorded += 1
        if recorded or unchecked:
            labels = skip.labels()
            _log.info(
                "skipped_catchup",
                schedule=skip.name,
                seat=skip.target,
                scope=f"{skip.scope_type}:{skip.scope_id}",
                fire_label=labels[-1],
                oldest_label=labels[0],
                count=recorded + unchecked,
                unchecked=unchecked,
                reason=skip.reason,
            )
