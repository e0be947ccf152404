"""Answering requests on one subject of the node's connection: the shared part of every responder.

A node answers peers on subjects of its own (``crewlet.estate.rpc.<node>``,
``crewlet.history.scatter.<node>``): no queue group, because the asker chose this node. Each
request runs in its own task (a slow answer must not hold up a quick one behind it), and stopping
unsubscribes first, then waits for the answers in hand. Subclasses say how one request is answered
(:meth:`Responder.answer`); :meth:`Responder.respond` sends bytes, at most once, never raising.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

__all__ = ["Responder"]


class Responder(abc.ABC):
    """Serves one subject on a connection, one task per request.

    Args:
        nc: The node's one connection.
        subject: The subject answered (a node's own: no queue group).
    """

    def __init__(self, nc: Client, subject: str) -> None:
        self._nc = nc
        self._subject = subject
        self._sub: Subscription | None = None
        self._inflight: set[asyncio.Task[None]] = set()

    @property
    def payload_limit(self) -> int:
        """The largest answer in bytes this connection may send, less 1 KiB for headers."""
        return max(int(self._nc.max_payload) - 1024, 1024)

    async def start(self) -> None:
        """Subscribe to the subject."""
        self._sub = await self._nc.subscribe(self._subject, cb=self._on_msg)

    async def _on_msg(self, msg: Msg) -> None:
        task = asyncio.create_task(self.answer(msg))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    @abc.abstractmethod
    async def answer(self, msg: Msg) -> None:
        """Answer one request (call :meth:`respond`); must not raise."""

    async def respond(self, msg: Msg, data: bytes) -> None:
        """Send ``data`` as the reply to ``msg`` (nothing when it has no reply subject; never raises)."""
        if not msg.reply:
            return
        with contextlib.suppress(Exception):
            await msg.respond(data)

    async def stop(self, *, grace: float = 10.0) -> None:
        """Stop taking requests, then wait up to ``grace`` seconds for the answers in hand."""
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=grace)
