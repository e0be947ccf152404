"""The scheduler tick (CO-33), run under the ``worker:scheduler`` duty lease (FL-91..FL-93).

The work list comes from the org, never from this node's seats (FL-93: a workers node holds no
seats): every ``schedules`` entry on a role (run as that seat) and on a unit (``target: each`` =
every direct agent role, ``lead`` = the unit's effective lead). Each tick fires what came due since
the previous tick; the first tick after start catches up only the single most recent missed fire
inside half the schedule's period, clamped to ``[catchup_min_seconds, catchup_max_seconds]``.
Cron uses croniter (five fields, Vixie day semantics) in the schedule's time zone, so DST moves
with the wall clock. A schedule without ``timezone`` runs in ``scheduling.default_timezone``, else
in the company ``timezone`` (``Company.schedule_timezone``).

A due fire is claimed first-writer-wins in the ``fires`` bucket (7 days) under
``(scope_type, scope_id, schedule_name, fire_label, target)`` with ``fire_label`` the local wall
clock ``YYYYmmddTHHMM``, so it is at most once fleet-wide even when two holders overlap. A claim
that cannot be made is retried next tick (fails closed). Then a ``task_assigned`` goes to the seat's
inbox and ``scheduled_task_fired`` is logged.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from croniter import croniter

from shared import logs
from shared.coordination import Coordination, CoordinationUnavailable, RevisionConflict

__all__ = ["Fire", "Scheduler", "due_fires"]

_log = logs.get("workers.scheduler")


@dataclass(frozen=True)
class Fire:
    """One due fire of one schedule for one seat."""

    scope_type: str
    scope_id: str
    name: str
    target: str
    task: str
    at: datetime
    label: str
    timeout_seconds: float

    @property
    def claim_key(self) -> str:
        """The ``fires`` bucket key (hashed: KV keys allow a narrow alphabet)."""
        ident = "|".join((self.scope_type, self.scope_id, self.name, self.label, self.target))
        return "fire." + hashlib.sha256(ident.encode()).hexdigest()[:40]


def _schedules(org: Any) -> list[tuple[str, str, Any, list[str]]]:
    """Every schedule with its scope and target seats, from the org (FL-93)."""
    out: list[tuple[str, str, Any, list[str]]] = []
    agents = {s.handle for s in org.seats}
    for seat in org.seats:
        for sched in seat.role.schedules:
            out.append(("role", seat.handle, sched, [seat.handle]))
    for unit in org.units:
        for sched in unit.unit.schedules:
            if sched.target == "lead":
                targets = [unit.effective_lead] if unit.effective_lead else []
            else:
                targets = list(unit.roles)
            out.append(("unit", unit.id, sched, [t for t in targets if t in agents]))
    return out


def due_fires(org: Any, *, since: datetime, until: datetime, first: bool, tick: timedelta) -> list[Fire]:
    """Return the fires due in ``(since, until]`` (CO-33).

    Args:
        org: The org model.
        since: The previous tick (UTC).
        until: Now (UTC).
        first: The first tick after start: catch up only the most recent missed fire inside half
            the period, clamped to the company's catch-up bounds.
        tick: The tick interval.
    """
    company = org.company
    out: list[Fire] = []
    for scope_type, scope_id, sched, targets in _schedules(org):
        if not sched.enabled or not targets:
            continue
        tz = ZoneInfo(company.schedule_timezone(sched))
        local_until = until.astimezone(tz)
        if first and sched.catchup:
            it = croniter(sched.cron, local_until)
            prev = it.get_prev(datetime)
            before = it.get_prev(datetime)
            half = (prev - before).total_seconds() / 2
            window = min(
                max(half, company.scheduling.catchup_min_seconds), company.scheduling.catchup_max_seconds
            )
            start = local_until - timedelta(seconds=window)
            times = [prev] if prev > start else []
        else:
            start_local = (since if not first else until - tick).astimezone(tz)
            it = croniter(sched.cron, start_local)
            times = []
            while True:
                nxt = it.get_next(datetime)
                if nxt > local_until:
                    break
                times.append(nxt)
        for t in times:
            for target in targets:
                out.append(
                    Fire(
                        scope_type,
                        scope_id,
                        sched.name,
                        target,
                        sched.task,
                        t.astimezone(UTC),
                        t.strftime("%Y%m%dT%H%M"),
                        sched.timeout_seconds,
                    )
                )
    return out


class Scheduler:
    """Evaluates schedules on each tick the duty lease allows.

    Args:
        coord: The coordination store (the ``fires`` bucket).
        publish: Puts a ``task_assigned`` on a seat's inbox: ``publish(handle, fire)``.
    """

    def __init__(self, coord: Coordination, publish: Callable[[str, Fire], Awaitable[None]]) -> None:
        self._coord = coord
        self._publish = publish
        self._last: datetime | None = None

    async def tick(self, org: Any, *, now: datetime | None = None) -> list[Fire]:
        """Fire what came due since the previous tick; return the fires this tick published."""
        now = now or datetime.now(UTC)
        tick = timedelta(seconds=org.company.scheduling.tick_seconds)
        first = self._last is None
        fires = due_fires(org, since=self._last or now, until=now, first=first, tick=tick)
        published: list[Fire] = []
        for fire in fires:
            try:
                await self._coord.create(
                    "fires", fire.claim_key, json.dumps({"at": fire.at.isoformat()}).encode()
                )
            except RevisionConflict:
                continue  # fired already, by this node or a peer
            except CoordinationUnavailable as e:
                _log.warning("schedule_claim_unknown", schedule=fire.name, seat=fire.target, error=str(e))
                return published  # fails closed: the window stays open for the next tick
            await self._publish(fire.target, fire)
            _log.info("scheduled_task_fired", schedule=fire.name, seat=fire.target, fire_label=fire.label)
            published.append(fire)
        self._last = now
        return published
