"""One call's tour of the data nodes: who is asked next, and what each one said (ES-33, ES-34).

:class:`EstateRouter.call <shared.router.EstateRouter.call>` walks a tour: the first targets
(the named node, this node's own copy, or the ordered peers), then — when this node's own copy
was asked first and did not serve — the peers in order, and last, with ``take_anyway``, the copies
that answered ``lagging``. The tour keeps every node's reply so that a call nobody served raises
:class:`NobodyAnswered` (or :class:`OutcomeUnknown` after an ``unvouched`` write) naming them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from shared.estate import Answer, OutcomeUnknown

from ._errors import NobodyAnswered, NodeReply

__all__ = ["Tour"]


class Tour:
    """The order of asking for one call, grown as nodes pass (ES-33, ES-34).

    Args:
        targets: The nodes to ask first, in order.
        replies: What was already noted before anyone was asked (this node's copy out of service).
        peers_later: True when ``targets`` is this node's own copy alone: if it does not serve, the
            peers (from ``peers``) are asked next.
        peers: Returns the peers to ask, in order, without this node.

    Attributes:
        targets: Every node put on the tour (empty: presence named no live data node).
        replies: What each node asked said, in order.
        unvouched: True once a node answered ``unvouched`` (a write whose fate it cannot establish).
    """

    def __init__(
        self,
        targets: list[str],
        replies: list[NodeReply],
        *,
        peers_later: bool,
        peers: Callable[[], Awaitable[list[str]]],
    ) -> None:
        self.targets = targets
        self.replies = replies
        self.unvouched = False
        self._rounds = [(t, False) for t in targets]
        self._i = 0
        self._lagging: list[str] = []
        self._peers_later = peers_later
        self._peers = peers

    async def next_target(self) -> tuple[str, bool] | None:
        """Return the next ``(node, take_anyway)`` to ask, or None when the tour is over."""
        if self._i == len(self._rounds):
            if not self._peers_later:
                return None
            # the local copy did not serve: now the peers, in order (ES-33)
            self._peers_later = False
            peers = await self._peers()
            self.targets += peers
            self._rounds += [(t, False) for t in peers]
            if not peers and self._lagging:  # nobody else: the lagging copy is asked again, anyway
                self._again_lagging()
            if self._i == len(self._rounds):
                return None
        turn = self._rounds[self._i]
        self._i += 1
        return turn

    def note(self, reply: NodeReply) -> None:
        """Record what a node said (or why it was not asked)."""
        self.replies.append(reply)

    def passed(self, target: str, anyway: bool, ans: Answer) -> None:
        """Record an answer that ran nothing or was ``unvouched`` (ES-34).

        A copy that answered ``lagging`` is asked again last, with ``take_anyway``, once every
        other node has been asked.
        """
        if ans.status == "unvouched":
            self.replies.append(NodeReply(target, "unvouched", ans.detail))
            self.unvouched = True
            return
        self.replies.append(NodeReply(target, ans.reason or "ran_nothing", ans.detail))
        if ans.reason == "lagging" and not anyway:
            self._lagging.append(target)
        if self._i == len(self._rounds) and self._lagging and not self._peers_later:
            self._again_lagging()

    def _again_lagging(self) -> None:
        self._rounds += [(t, True) for t in self._lagging]
        self._lagging = []

    def gave_up(self, domain: str | None, op_id: str | None) -> OutcomeUnknown | NobodyAnswered:
        """The error of a tour on which nobody served (ES-35, ES-36).

        Returns:
            :class:`OutcomeUnknown` when a node answered ``unvouched`` to a write (``op_id`` set),
            else :class:`NobodyAnswered` carrying every reply.
        """
        if self.unvouched and op_id:
            return OutcomeUnknown(
                op_id,
                "every node that may have run it was unvouched: " + "; ".join(r.line() for r in self.replies),
            )
        return NobodyAnswered(
            domain or "estate", self.replies, note="" if self.targets else "presence names no live data node"
        )
