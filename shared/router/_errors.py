"""Errors of the router seam (see the tree in :mod:`shared.errors`).

::

    ServiceError
    └── RouterError                     the router could not reach the estate
        ├── NobodyAnswered              no data node served the call; carries what each one said (ES-36)
        └── AnswerTooLarge              a reply over the payload limit, refused by name (ES-38)

Errors a data node *ran* and refused (not found, conflicts, ``unknown`` outcomes) reach the caller
as the estate's own types (:mod:`shared.estate`).
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.errors import ServiceError

__all__ = ["AnswerTooLarge", "NobodyAnswered", "NodeReply", "RouterError"]


@dataclass(frozen=True)
class NodeReply:
    """What one data node said to a call nobody served.

    Attributes:
        node: The node id.
        said: ``timeout``, ``no_responders``, ``not_asked``, or the node's ``ran_nothing`` reason
            (``lagging``, ``behind``, ``not_serving``...), or ``unvouched``.
        detail: Words for the operator.
    """

    node: str
    said: str
    detail: str = ""

    def line(self) -> str:
        """``node: said (detail)``."""
        return f"{self.node}: {self.said}" + (f" ({self.detail})" if self.detail else "")


class RouterError(ServiceError):
    """Base of every router failure."""


class NobodyAnswered(RouterError):
    """No data node served the call (ES-36): never an empty answer.

    Attributes:
        estate: The estate nobody served (``tracker`` or ``pages``, or ``estate`` for admin calls).
        replies: What each data node said, in the order asked; empty only when presence named no
            live data node at all (the message says so).
    """

    def __init__(self, estate: str, replies: list[NodeReply], *, note: str = "") -> None:
        self.estate = estate
        self.replies = list(replies)
        said = "; ".join(r.line() for r in replies) if replies else (note or "no live data node in presence")
        super().__init__(f"nobody answered for the {estate} estate: {said}")


class AnswerTooLarge(RouterError):
    """A data node's answer exceeds the broker's payload limit; refused by name, never truncated."""

    retryable = False
