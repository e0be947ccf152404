"""Custody: the events of a node without ``data`` kept by exactly one data node (ES-78, FL-144).

A node without ``data`` keeps no event log. What it publishes about itself (a finished turn, an
applied config revision) goes to ``crewlet.custody.events`` on the ``CREWLET_CUSTODY`` stream
(WorkQueue retention: a message stays until the custodian acks it, whether or not a data node is up
when it is published; replicas follow ``stream.replicas``). Data nodes, and only they, pull from the
one durable ``crewlet-custody`` group (:mod:`shared.bus._groups`, FL-86): whichever fetches a message
writes it into its own event log (ES-77's upsert on ``(event_time, event_id)``), reads it back, and
only then acks. The row records ``data.origin`` (the node that published it) and ``data.custodian``
(the data node that wrote it; also the row's ``node``). ``Nats-Msg-Id`` is the event id, so a publish
repeated inside the stream's duplicate window is stored once; a redelivery after a custodian died
between writing and acking lands on the same key, so it is one row per log — and the WorkQueue
hands each message to one member at a time, so one data node holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext

from shared import logs

from ._groups import CUSTODY_GROUP, attach_group

__all__ = ["CUSTODY_SUBJECT", "Custodian", "CustodySender"]

_log = logs.get("bus.custody")

CUSTODY_SUBJECT = "crewlet.custody.events"
"""Where a node without data publishes its events (ES-78)."""
MAX_PENDING = 10_000
"""Events a sender holds while the broker does not take them; the oldest is dropped beyond."""


class CustodySender:
    """Hands this node's events to the custody stream, in order, retrying until each is stored.

    :meth:`send` never blocks or raises (an event never fails its caller, like ES-77's log). A
    publish the broker does not acknowledge is sent again with the same ``Nats-Msg-Id`` after a
    backoff of 0.5 s doubling to 5 s.

    Args:
        js: The node's JetStream context.
        origin: This node's id (``data.origin`` of every event it sends).
        max_pending: Events held at most while unsent (beyond: ``custody_event_dropped``).
    """

    def __init__(self, js: JetStreamContext, *, origin: str, max_pending: int = MAX_PENDING) -> None:
        self._js = js
        self.origin = origin
        self._pending: deque[dict[str, Any]] = deque()
        self._max = max_pending
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.sent = 0

    def send(self, ev: dict[str, Any]) -> None:
        """Queue one event (``{event_time (µs), event_id, event_type, ...}``, ES-77's shape)."""
        data = dict(ev.get("data") or {})
        data["origin"] = self.origin
        out = {**ev, "data": data}
        if len(self._pending) >= self._max:
            dropped = self._pending.popleft()
            _log.warning("custody_event_dropped", event_id=dropped.get("event_id"), pending=self._max)
        self._pending.append(out)
        self._wake.set()

    @property
    def pending(self) -> int:
        """Events not yet stored by the broker."""
        return len(self._pending)

    def start(self) -> None:
        """Start the sending task."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="custody-sender")

    async def _publish(self, ev: dict[str, Any]) -> None:
        body = json.dumps(ev, sort_keys=True, ensure_ascii=False, default=str).encode()
        await self._js.publish(
            CUSTODY_SUBJECT, body, timeout=5.0, headers={"Nats-Msg-Id": str(ev["event_id"])}
        )

    async def _run(self) -> None:
        backoff = 0.5
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
                continue
            ev = self._pending[0]
            try:
                await self._publish(ev)
            except (nats.errors.Error, nats.js.errors.Error, TimeoutError) as e:
                _log.warning(
                    "custody_publish_retry",
                    event_id=ev.get("event_id"),
                    error=f"{type(e).__name__}: {e}",
                    retry_in=backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.5
            if self._pending and self._pending[0] is ev:
                self._pending.popleft()
            self.sent += 1
            _log.debug("custody_event_sent", event_id=ev.get("event_id"), event_type=ev.get("event_type"))

    async def stop(self, *, grace: float = 5.0) -> None:
        """Send what is queued for up to ``grace`` seconds, then stop (what is left is logged)."""
        if self._task is None:
            return
        deadline = asyncio.get_running_loop().time() + grace
        while self._pending and asyncio.get_running_loop().time() < deadline and not self._task.done():
            await asyncio.sleep(0.05)
        if self._pending:
            _log.warning("custody_events_unsent", pending=len(self._pending))
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None


class Custodian:
    """A data node's member of the custody group: writes each event into its own log, then acks.

    Args:
        js: The node's JetStream context.
        node_id: This data node's id (``data.custodian`` of what it writes).
        write: ``await write(ev)`` stores one event and returns True once it reads back from the
            log; False or an exception leaves the message unacked (another member, or this one
            after the ack wait, takes it again).
        batch: Messages per fetch.
    """

    def __init__(
        self,
        js: JetStreamContext,
        *,
        node_id: str,
        write: Callable[[dict[str, Any]], Awaitable[bool]],
        batch: int = 64,
    ) -> None:
        self._js = js
        self.node_id = node_id
        self._write = write
        self._batch = batch
        self._psub: Any = None
        self._task: asyncio.Task[None] | None = None
        self.written = 0

    async def start(self) -> bool:
        """Join the custody group (data nodes only, FL-86) and start taking events.

        Returns:
            True when joined.

        Raises:
            BusUnavailable: the group could not be created or bound.
        """
        self._psub = await attach_group(self._js, CUSTODY_GROUP, has_data=True)
        if self._psub is None:
            return False
        self._task = asyncio.create_task(self._run(), name="custodian")
        return True

    async def _take(self, msg: Any) -> None:
        try:
            ev = json.loads(msg.data)
            if not isinstance(ev, dict) or "event_id" not in ev or "event_time" not in ev:
                raise ValueError("not an event")
        except ValueError as e:
            _log.error("custody_event_malformed", error=str(e), size=len(msg.data))
            await msg.term()
            return
        data = dict(ev.get("data") or {})
        data["custodian"] = self.node_id
        ev = {**ev, "data": data}
        try:
            ok = await self._write(ev)
        except Exception as e:  # noqa: BLE001 - unacked: taken again after the ack wait
            _log.warning("custody_write_failed", event_id=ev["event_id"], error=f"{type(e).__name__}: {e}")
            return
        if not ok:
            _log.warning("custody_write_failed", event_id=ev["event_id"], error="not found after writing")
            return
        await msg.ack()
        self.written += 1
        _log.info(
            "custody_event_written",
            event_id=ev["event_id"],
            event_type=ev.get("event_type"),
            origin=data.get("origin"),
        )

    async def _run(self) -> None:
        while True:
            try:
                msgs = await self._psub.fetch(self._batch, timeout=2.0)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the broker is away: ask again shortly
                _log.warning("custody_fetch_failed", error=f"{type(e).__name__}: {e}")
                await asyncio.sleep(1.0)
                continue
            for msg in msgs:
                try:
                    await self._take(msg)
                except (nats.errors.Error, nats.js.errors.Error) as e:
                    _log.warning("custody_ack_failed", error=f"{type(e).__name__}: {e}")

    async def stop(self) -> None:
        """Stop taking events (a message in hand is redelivered after the ack wait)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._psub is not None:
            with contextlib.suppress(Exception):
                await self._psub.unsubscribe()
            self._psub = None
