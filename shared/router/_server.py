"""The data node's side of the router: answer ``crewlet.estate.rpc.<node_id>`` (ES-38).

Each request runs in its own task (a write waits for its apply; it must not hold up a read behind
it), and is answered exactly once. Stopping unsubscribes first, then waits for the calls in hand.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from shared import logs
from shared.estate import Answer, Call

from ._wire import decode_call, encode_answer, rpc_subject

__all__ = ["RpcServer"]

_log = logs.get("router")


class RpcServer:
    """Serves one node's estate calls from peers.

    Args:
        nc: The node's one connection.
        node_id: This node's id (the subject it answers).
        handler: Runs one call (``EstateService.serve``).
    """

    def __init__(self, nc: Client, *, node_id: str, handler: Callable[[Call], Awaitable[Answer]]) -> None:
        self._nc = nc
        self._node = node_id
        self._handler = handler
        self._sub: Subscription | None = None
        self._inflight: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Subscribe to ``crewlet.estate.rpc.<node_id>`` (no queue group: the asker chose this node)."""
        self._sub = await self._nc.subscribe(rpc_subject(self._node), cb=self._on_msg)

    async def _on_msg(self, msg: Msg) -> None:
        task = asyncio.create_task(self._answer(msg))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _answer(self, msg: Msg) -> None:
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
        if not msg.reply:
            return
        with contextlib.suppress(Exception):
            await msg.respond(encode_answer(answer, limit=max(self._nc.max_payload - 1024, 1024)))

    async def stop(self, *, grace: float = 10.0) -> None:
        """Stop taking calls, then wait up to ``grace`` seconds for the calls in hand."""
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=grace)
