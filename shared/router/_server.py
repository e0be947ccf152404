"""The data node's side of the router: answer ``crewlet.estate.rpc.<node_id>`` (ES-38).

Each request runs in its own task (a write waits for its apply; it must not hold up a read behind
it), and is answered exactly once. Stopping unsubscribes first, then waits for the calls in hand.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg

from shared import logs
from shared.broker import Responder
from shared.estate import Answer, Call

from ._wire import decode_call, encode_answer, rpc_subject

__all__ = ["RpcServer"]

_log = logs.get("router")


class RpcServer(Responder):
    """Serves one node's estate calls from peers on ``crewlet.estate.rpc.<node_id>``.

    Args:
        nc: The node's one connection.
        node_id: This node's id (the subject it answers).
        handler: Runs one call (``EstateService.serve``).
    """

    def __init__(self, nc: Client, *, node_id: str, handler: Callable[[Call], Awaitable[Answer]]) -> None:
        super().__init__(nc, rpc_subject(node_id))
        self._node = node_id
        self._handler = handler

    async def answer(self, msg: Msg) -> None:
        """Decode one call, run it, and answer it exactly once (a failure is ``ran_nothing``)."""
        try:
            call = decode_call(msg.data)
        except (ValueError, TypeError, KeyError) as e:
            answer = Answer(status="ran_nothing", node=self._node, reason="protocol", detail=str(e))
        else:
            try:
                answer = await self._handler(call)
            except Exception as e:  # noqa: BLE001 - a peer is always answered, never left to time out
                _log.error("estate_rpc_failed", op=call.op, error=f"{type(e).__name__}: {e}")
                answer = Answer(
                    status="ran_nothing",
                    node=self._node,
                    reason="not_serving",
                    detail=f"{type(e).__name__}: {e}",
                )
        if msg.reply:
            await self.respond(msg, encode_answer(answer, limit=self.payload_limit))
