"""The node's answer to history scatter reads on ``crewlet.history.scatter.<node_id>`` (ES-79).

Every node holds turn records (``node.db``), so every node answers; event reads find rows only on
data nodes. The records are looked up per request, so a responder started before the data role
opens its event log answers event reads once it is open.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from shared import logs
from shared.estate import EventLog
from shared.records import TurnStore

from ._protocol import VERSION, answer_request, decode, encode, scatter_subject

__all__ = ["HistoryResponder"]

_log = logs.get("history")


class HistoryResponder:
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
        self._nc = nc
        self._node = node_id
        self._turns = turns
        self._events = events
        self._sub: Subscription | None = None
        self._inflight: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Subscribe to ``crewlet.history.scatter.<node_id>`` (no queue group: the asker chose this node)."""
        self._sub = await self._nc.subscribe(scatter_subject(self._node), cb=self._on_msg)

    async def _on_msg(self, msg: Msg) -> None:
        task = asyncio.create_task(self._answer(msg))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _answer(self, msg: Msg) -> None:
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
        limit = max(self._nc.max_payload - 1024, 1024)
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
        with contextlib.suppress(Exception):
            await msg.respond(data)

    async def stop(self, *, grace: float = 5.0) -> None:
        """Stop answering, then wait up to ``grace`` seconds for the answers in hand."""
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=grace)
