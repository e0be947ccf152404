"""Errors of the turns seam.

A turn never raises for what happens *inside* it: provider failures, tool errors, the fence
and defects are recorded on the :class:`~shared.turns.TurnResult` (CO-16, CO-18). What raises
is a call the caller should not have made::

    CrewletError
    └── TurnError                 (shared.turns) the seam's base
        └── SeatNotRunnable       no such seat, or a human seat (also a UsageError)
"""

from __future__ import annotations

from shared.errors import CrewletError, UsageError

__all__ = ["SeatNotRunnable", "TurnError"]


class TurnError(CrewletError):
    """Base of every error of the turns seam."""


class SeatNotRunnable(TurnError, UsageError):
    """The handle names no seat of the pinned org, or a human seat (CO-2: humans never run).

    The dispatcher screens both before a turn (CO-11); reaching the engine with one is a bug.
    """
