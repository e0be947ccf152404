"""Holding a seat off after a turn asked for a redelivery (issue 14, CO-7).

A turn that asks for its delivery to be redelivered (no provider answered, every key benched, ...)
holds its seat for that delivery's NAK delay: :class:`SeatHolds` keeps each seat's hold and its
redeliveries in a row, :func:`redelivery_delay` says how long. Used by
:class:`services.seats.dispatcher.Dispatcher`, which re-exports the public names.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable

from shared import logs
from shared.bus import Delivery, Mailbox, RetryLater
from shared.turns import TurnResult

__all__ = ["REDELIVERY_JITTER", "SeatHolds", "TurnRedelivery", "redelivery_delay"]

_log = logs.get("seat.dispatcher")
REDELIVERY_JITTER = 0.25
"""A redelivery's own backoff step is stretched by a random 0..25 % (ours, issue 14): seats that
failed together on one provider do not come back in lockstep, and never sooner than the CO-7
step (1 s doubling to 30 s)."""


class TurnRedelivery(RetryLater):
    """The turn asked for its delivery to be redelivered (fenced, or no provider before any effect).

    NAKed with backoff, and no sooner than ``delay`` seconds when every key of the seat's providers
    is benched that long (CO-42), so a long cooldown spends one delivery, not the budget (FL-82).
    """


class SeatHolds:
    """Each seat's hold and its redeliveries in a row (issue 14).

    Args:
        released: Seat -> the event set when the seat is released (a hold ends at once); the
            dispatcher's own map, shared.
    """

    def __init__(self, released: dict[str, asyncio.Event]) -> None:
        self._until: dict[str, float] = {}  # seat -> monotonic instant its hold ends
        self._streaks: dict[str, int] = {}  # seat -> redeliveries asked in a row (backoff attempt)
        self._released = released

    def held(self, handle: str) -> float:
        """Seconds left of the seat's hold (0.0 when it is not held).

        A turn that asked for its delivery to be redelivered (no provider answered, every key
        benched, ...) holds its seat for as long as that delivery's NAK delay: the seat fetches
        no new batch meanwhile, and the later groups of the batch in hand wait too (kept alive,
        FL-83), so six queued messages during a provider storm make one call per backoff step,
        not six. A committed turn ends the hold.
        """
        until = self._until.get(handle)
        if until is None:
            return 0.0
        left = until - time.monotonic()
        if left <= 0:
            self._until.pop(handle, None)
            return 0.0
        return left

    async def wait(self, handle: str) -> None:
        """Sleep out the seat's hold; return early when the seat is released."""
        left = self.held(handle)
        if not left:
            return
        released = self._released.get(handle)
        if released is None:
            await asyncio.sleep(left)
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(released.wait(), left)

    def start(self, handle: str, group: list[Delivery], box: Mailbox, result: TurnResult) -> float:
        """Start the seat's hold after a turn that asked for a redelivery; return its length.

        The length (issue 14, CO-7): what the servers asked (``result.retry_after``: the largest
        ``Retry-After`` of the failed calls, or how long every key stays benched, CO-42) when they
        said; else the bus's backoff step (1 s doubling to 30 s) for the larger of the delivery's
        count and the seat's redeliveries in a row, stretched by :data:`REDELIVERY_JITTER`. Never
        less than the NAK delay the mailbox itself applies (its step for the delivery count).
        """
        streak = self._streaks.get(handle, 0) + 1
        self._streaks[handle] = streak
        delivered = max(d.num_delivered for d in group)
        delay = redelivery_delay(box.backoff(max(delivered, streak)), result.retry_after)
        delay = max(delay, box.backoff(delivered))
        self._until[handle] = time.monotonic() + delay
        _log.info(
            "seat_turn_held",
            seat=handle,
            turn_id=result.turn_id,
            seconds=round(delay, 3),
            asked=result.retry_after,
            attempt=max(delivered, streak),
            error_kind=result.error_kind,
        )
        return delay

    def clear(self, handle: str) -> None:
        """A committed turn ends the seat's hold and its streak."""
        self._streaks.pop(handle, None)
        self._until.pop(handle, None)


def redelivery_delay(step: float, asked: float | None, *, rng: Callable[[], float] = random.random) -> float:
    """Seconds a turn's delivery waits before it is redelivered (issue 14, CO-7).

    Args:
        step: The backoff step for this attempt, in seconds (the bus's: 1 s doubling to 30 s).
        asked: What the servers asked (``Retry-After``, capped at 300 s, or a bench's time left,
            CO-42), in seconds; None when none said.
        rng: A source of floats in [0, 1) for the jitter.

    Returns:
        ``asked`` when given (the server knows best; never shortened); else ``step`` stretched by a
        random 0..:data:`REDELIVERY_JITTER` of itself.
    """
    if asked is not None:
        return max(0.0, asked)
    return step * (1.0 + REDELIVERY_JITTER * rng())
