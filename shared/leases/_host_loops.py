"""The seat host's two timers: the heartbeat schedule (FL-52, FL-72) and the placement sweep (FL-56).

Both loops outlive any one failure: a failed heartbeat or sweep is logged (``seat_heartbeat_failed``,
``seat_sweep_unknown``, ``seat_sweep_failed``) and the next one runs on time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from shared import logs
from shared.coordination import CoordinationUnavailable

__all__ = ["heartbeat_loop", "renew_lead", "sweep_loop"]

_log = logs.get("seat.host")


def renew_lead(heartbeat: float, costs: Sequence[float]) -> float:
    """How early (seconds) a heartbeat starts before the last renew's admission window closes.

    FL-72 admits a turn only while the last renew was *sent* within one heartbeat, and a renew
    counts from when it is sent, so a renew must start, and finish, before that window closes,
    or admission and the in-turn fence (FL-74) flap for the length of its round trip. The
    lead is twice the slowest of the recent heartbeats' costs (``costs``: seconds from when the
    heartbeat was due to when its renewals returned, so event-loop lag counts too), at least
    min(0.5 s, a quarter of the heartbeat) and at most a quarter of the heartbeat: the heartbeat
    still runs every TTL/3 (FL-52) give or take that lead. Measured before this: at 128 turns in
    flight on one event loop (bench 5c) a fixed 0.5 s lead fenced about one turn in ten, and a
    test node's 3 s TTL (a 50 ms lead) fenced turns whenever its loop lagged 50 ms on a busy
    machine. With the default TTL (45 s) the lead is 0.5–3.75 s.

    Args:
        heartbeat: The heartbeat interval in seconds (TTL/3).
        costs: The recent heartbeats' costs in seconds.
    """
    floor = min(0.5, heartbeat * 0.25)
    return min(heartbeat * 0.25, max(floor, 2 * max(costs, default=0.0)))


async def heartbeat_loop(
    renew_all: Callable[[], Awaitable[Any]], *, heartbeat: float, clock: Callable[[], float]
) -> None:
    """Run ``renew_all`` every ``heartbeat`` seconds, each started early by :func:`renew_lead`.

    A fixed-rate schedule counted from when each heartbeat started (not from when it finished), so
    a slow round trip or a busy loop does not let the FL-72 window lapse between two renewals.
    Runs until cancelled.
    """
    costs: deque[float] = deque(maxlen=5)
    due = clock() + heartbeat - renew_lead(heartbeat, costs)
    while True:
        await asyncio.sleep(max(0.0, due - clock()))
        started = clock()
        try:
            await renew_all()
        except Exception as e:  # noqa: BLE001 - the heartbeat must outlive any one failure
            _log.error("seat_heartbeat_failed", error=f"{type(e).__name__}: {e}")
        costs.append(max(0.0, clock() - due))
        due = started + heartbeat - renew_lead(heartbeat, costs)


async def sweep_loop(
    sweep: Callable[[], Awaitable[Any]],
    *,
    nudged: asyncio.Event,
    interval: float,
    stopping: Callable[[], bool],
) -> None:
    """Run ``sweep`` every ``interval`` seconds, or at once when ``nudged`` is set, until ``stopping()``.

    Ends by the flag, not only by cancel: on Python 3.11 a cancel that meets a nudge completing the
    wait_for can be swallowed, and the drain would wait for this loop for good.
    """
    while not stopping():
        try:
            await sweep()
        except CoordinationUnavailable as e:  # unknown: skip this sweep, keep what is held
            _log.warning("seat_sweep_unknown", error=str(e))
        except Exception as e:  # noqa: BLE001 - the sweep must outlive any one failure
            _log.error("seat_sweep_failed", error=f"{type(e).__name__}: {e}")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(nudged.wait(), interval)
        nudged.clear()
