"""Errors of the leases seam (see the tree in :mod:`shared.errors`).

Every lease question answers yes, no or unknown (FL-32). *No* is a return value (``None``/``False``);
*unknown* is an exception deriving from :class:`~shared.coordination.CoordinationUnavailable`, so a
caller that catches the coordination seam's unknown also catches this seam's::

    LeaseError                  base of this seam
    └── LeaseContention         64 compare-and-set rounds lost in one lease operation (FL-51):
                                unknown, never "somebody else holds it"
                                (also a CoordinationUnavailable)
"""

from __future__ import annotations

from shared.coordination import CoordinationUnavailable
from shared.errors import CrewletError

__all__ = ["LeaseContention", "LeaseError"]


class LeaseError(CrewletError):
    """Base of every failure the leases seam raises on its own account."""


class LeaseContention(LeaseError, CoordinationUnavailable):
    """A lease operation lost every one of its compare-and-set rounds (FL-51: 64).

    The answer is *unknown*: the seat may or may not be held by somebody. Retrying on the next
    heartbeat or sweep is safe.

    Attributes:
        resource: The lease resource (``seat:{handle}``).
        rounds: How many rounds were spent.
    """

    def __init__(self, resource: str, rounds: int) -> None:
        self.resource = resource
        self.rounds = rounds
        CoordinationUnavailable.__init__(self, f"{resource}: {rounds} compare-and-set rounds lost (FL-51)")
