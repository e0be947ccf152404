"""The node's answer to history scatter reads on ``crewlet.history.scatter.<node_id>`` (ES-79).

Every node holds turn records (``node.db``), so every node answers; event reads find rows only on
data nodes. The records are looked up per request, so a responder started before the data role
opens its event log answers event reads once it is open.
"""

from __future__ import annotations

from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.msg import Msg

from shared import logs
from shared.broker import Responder
from shared.estate import EventLog
from shared.records import TurnStore

from ._protocol import VERSION, answer_request, decode, encode, scatter_subject

__all__ = ["HistoryResponder"]

_log = logs.get("history")


class HistoryResponder(Responder):
    """Answers this node's share of history reads over the node's one connection.

    Args:
        nc: The node's one connection.
        node_id: This node's id (the subject it answers).
        turns: Returns this node's turn records (a ``TurnStore``), or None while they are not open.
        events: Returns this node's event log (an ``EventLog``), or None (no data role, or booting).
    """

    def __init__(
        self,
        nc: Client,
        *,
        node_id: str,
        turns: Callable[[], object],
        events: Callable[[], object],
    ) -> None:
        super().__init__(nc, scatter_subject(node_id))
        self._node = node_id
        self._turns = turns
        self._events = events

    async def answer(self, msg: Msg) -> None:
        """Answer one history read from this node's records (see :func:`answer_request`)."""
        try:
            req = decode(msg.data)
        except ValueError as e:
            ans = {"v": VERSION, "node": self._node, "error": {"code": "protocol", "message": str(e)}}
        else:
            try:
                turns, events = self._turns(), self._events()
                ans = await answer_request(
                    req,
                    node_id=self._node,
                    turns=turns if isinstance(turns, TurnStore) else None,
                    events=events if isinstance(events, EventLog) else None,
                )
            except Exception as e:  # noqa: BLE001 - a peer is always answered, never left to time out
                _log.error("history_scatter_failed", what=req.get("what"), error=f"{type(e).__name__}: {e}")
                ans = {"v": VERSION, "node": self._node, "error": {"code": "failed", "message": str(e)}}
        if not msg.reply:
            return
        data = encode(ans)
        limit = self.payload_limit
        rows = ans.get("rows")
        while len(data) > limit and isinstance(rows, list) and len(rows) > 1:
            # too big for one message: send the newest half and say there is more (the merge then
            # shows nothing older than the last row sent, so no row is skipped)
            rows = rows[: len(rows) // 2]
            ans = {**ans, "rows": rows, "more": True}
            data = encode(ans)
        if len(data) > limit:
            data = encode(
                {
                    "v": VERSION,
                    "node": self._node,
                    "error": {"code": "too_large", "message": f"the answer is over {limit} bytes"},
                }
            )
        await self.respond(msg, data)

    async def stop(self, *, grace: float = 5.0) -> None:
        """Stop answering, then wait up to ``grace`` seconds for the answers in hand."""
        await super().stop(grace=grace)
