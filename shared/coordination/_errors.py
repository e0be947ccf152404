"""Errors of the coordination seam (see the tree in :mod:`shared.errors`).

Every coordination question answers yes, no, or unknown (FL-32). *Unknown* is always an
exception deriving from :class:`CoordinationUnavailable`, never ``None``/``False``: "I do not hold
this seat" and "I could not ask" lead to opposite actions.
"""

from __future__ import annotations

from shared.errors import ServiceError

__all__ = [
    "BucketMismatch",
    "CoordinationBusy",
    "CoordinationError",
    "CoordinationUnavailable",
    "OutcomeUnknown",
    "RevisionConflict",
]


class CoordinationError(ServiceError):
    """Base of every coordination failure."""


class CoordinationUnavailable(CoordinationError):
    """The store could not be asked; the answer is unknown (FL-32). Retrying later is safe.

    The message always starts with "coordination store unavailable".
    """

    def __init__(self, detail: str = "") -> None:
        super().__init__("coordination store unavailable" + (f": {detail}" if detail else ""))


class CoordinationBusy(CoordinationUnavailable):
    """The key's leader refused the write while it holds an uncommitted proposal on it (server
    code 10164; infra-facts N1). Nothing of this write landed, but it is *not* a conflict with a
    known revision: a caller whose next step is a fresh read and another compare-and-set (a
    contended counter) may retry; everyone else reads it as unknown, like its parent.
    """


class OutcomeUnknown(CoordinationUnavailable):
    """A write was sent but no answer came back: it may have landed (infra-facts §3, N1).

    Re-read the key before deciding; never treat this as "failed".
    """


class RevisionConflict(CoordinationError):
    """A compare-and-set lost: the key is at another revision (or exists / is absent).

    A definitive *no*. Attributes:
        key: The key written.
        expected: The revision the caller expected (0 = absent).
    """

    retryable = False

    def __init__(self, key: str, expected: int) -> None:
        self.key = key
        self.expected = expected
        super().__init__(f"revision conflict on {key!r}: expected revision {expected}")


class BucketMismatch(CoordinationError):
    """An existing bucket has another shape than this node is configured for (FL-25).

    A booting node never rewrites an existing bucket; the message names both values and the way out.
    """

    retryable = False
