"""What the seat host keeps per seat, and the shapes of its hooks (FL-53, FL-68, FL-73).

:class:`HeldSeat` is one held seat's grant and flags; :class:`Undead` is a seat whose teardown
is unproven (its lease still renewed until a teardown succeeds, FL-68) and
:func:`tend_undead` retries those each heartbeat. The hook aliases name what
:class:`~shared.leases.SeatHost` calls on each edge.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from shared import logs
from shared.coordination import CoordinationUnavailable

from ._seat import Grant, SeatLeases

__all__ = [
    "AcquireHook",
    "HeldSeat",
    "QuiesceHook",
    "ReleaseHook",
    "ResumeHook",
    "Undead",
    "noop",
    "tend_undead",
]

_log = logs.get("seat.host")

_UNDEAD_ALARM_BEATS = 20  # FL-68: re-raise the alarm every 20 heartbeats (5 min at TTL 45 s)

AcquireHook = Callable[[str, int], Awaitable[None]]
"""``await on_acquire(handle, epoch)`` after a grant."""
ReleaseHook = Callable[[str, str], Awaitable[None]]
"""``await on_release(handle, reason)`` on a release (and ``on_released`` after one)."""
QuiesceHook = Callable[[str], Awaitable[None]]
"""``await on_quiesce(handle)`` at the first unknown renew (FL-73)."""
ResumeHook = Callable[[str, int], Awaitable[None]]
"""``await on_resume(handle, epoch)`` at the next good renew (FL-73)."""


async def noop(*_: Any) -> None:
    """The hook of a caller that passed none."""
    return None


@dataclass
class HeldSeat:
    """One seat this node holds.

    Attributes:
        grant: The current grant (epoch, revision, when its last write was sent).
        ready: ``on_acquire`` returned.
        quiesced: An unknown renew since the last good one (FL-73), or a recorded deferral.
        releasing: A voluntary release is tearing it down.
    """

    grant: Grant
    ready: bool = False
    quiesced: bool = False
    releasing: bool = False


@dataclass
class Undead:
    """A seat whose ``on_release`` raised: teardown unproven, lease kept renewed (FL-68).

    Attributes:
        grant: The lease still renewed; None once the lease itself was lost.
        reason: The release reason the teardown is retried with.
        since: When the teardown first failed (the host's monotonic clock, seconds).
        beats: Heartbeats since then (the alarm is raised again every 20).
    """

    grant: Grant | None
    reason: str
    since: float
    beats: int = 0


async def tend_undead(
    undead_seats: dict[str, Undead],
    *,
    leases: SeatLeases,
    on_release: ReleaseHook,
    give_up: Callable[[str, Grant, str], Awaitable[None]],
    clock: Callable[[], float],
) -> None:
    """One heartbeat's care of the undead seats (FL-68).

    Renews each one's lease, retries its teardown, and on success drops it from ``undead_seats``
    and gives its lease up (``give_up(handle, grant, reason)``). A teardown still failing raises
    ``seat_teardown_unproven`` again every 20 heartbeats with the elapsed time.
    """
    for handle, undead in list(undead_seats.items()):
        undead.beats += 1
        if undead.grant is not None:
            try:
                undead.grant = await leases.renew(undead.grant)
            except CoordinationUnavailable:
                pass  # keep trying; it may lapse if the store stays away
        try:
            await on_release(handle, undead.reason)
        except Exception as e:  # noqa: BLE001
            if undead.beats % _UNDEAD_ALARM_BEATS == 0:
                _log.error(
                    "seat_teardown_unproven",
                    seat=handle,
                    reason=undead.reason,
                    unproven_seconds=round(clock() - undead.since, 3),
                    error=f"{type(e).__name__}: {e}",
                )
            continue
        del undead_seats[handle]
        if undead.grant is not None:
            await give_up(handle, undead.grant, undead.reason)
