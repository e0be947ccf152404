"""Errors of the budgets seam (CO-37, FL-119).

::

    CrewletError
    └── BudgetError                 base of this seam
        ├── BudgetExhausted         a capped window has no room: a definitive refusal, not a fault
        └── BudgetUnavailable       (also ServiceError) the counters could not be read or written:
                                    the answer is unknown, never reported as out of budget (FL-119)

A refusal and a store fault lead to opposite actions (park the seat until the window turns, or fail
the turn as a store error), so they never share a class.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from shared.errors import CrewletError, ServiceError

from ._windows import Period

__all__ = ["BudgetError", "BudgetExhausted", "BudgetUnavailable"]


class BudgetError(CrewletError):
    """Base of every budgets failure."""


class BudgetExhausted(BudgetError):
    """A capped window has no room for the charge (CO-37's ``budget_exhausted``).

    Nothing was incremented by the refused charge (FL-119). Retrying before ``resets_at`` fails the
    same way unless a revision raises the ceiling or an operator resets the scope.

    Attributes:
        scope: The refusing scope: ``org`` or ``agent:<agent id>``.
        period: ``day``, ``week`` or ``month``.
        resets_at: When the refusing window turns over: the next window's start, aware UTC.
        spent: Tokens already counted in the window when the charge was refused.
        ceiling: The window's cap in tokens.
        requested: Tokens the refused charge asked for (0 for a :meth:`Budgets.refusal` probe
            answer, which asks for 1).
    """

    retryable = False

    def __init__(
        self,
        scope: str,
        period: Period,
        resets_at: datetime,
        spent: int,
        ceiling: int,
        *,
        requested: int = 0,
    ) -> None:
        self.scope = scope
        self.period: Period = period
        self.resets_at = resets_at
        self.spent = spent
        self.ceiling = ceiling
        self.requested = requested
        if requested > ceiling:  # waiting for the window cannot help this round
            after = f"one round of {requested} tokens is larger than the whole ceiling: raise the ceiling"
        else:
            after = f"asked {requested}; the window turns at {resets_at.isoformat()}"
        super().__init__(
            f"budget exhausted: {scope} has spent {spent} of {ceiling} tokens this {period} ({after})"
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the ``budget_exhausted`` figures: ``{scope, period, resets_at, spent, ceiling,
        requested}``.

        ``resets_at`` is an ISO 8601 UTC string; ``spent``, ``ceiling`` and ``requested`` (what the
        refused round asked for) are tokens.
        """
        return {
            "scope": self.scope,
            "period": self.period,
            "resets_at": self.resets_at.isoformat(),
            "spent": self.spent,
            "ceiling": self.ceiling,
            "requested": self.requested,
        }


class BudgetUnavailable(BudgetError, ServiceError):
    """The budget counters could not be read or written (FL-119, fleet.md's "budget charge: closed").

    Raised for a coordination store error underneath (unavailable, an outcome unknown, a
    compare-and-set that kept losing). The round must not run, and the turn fails as a store error:
    this is never an exhaustion. Retrying later is safe.
    """

    retryable = True
