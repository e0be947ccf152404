"""Seat mailboxes: one durable pull consumer per seat, attached only by the lease holder (FL-77..FL-84).

The mailbox is the consumer, not the connection reading it: created with nothing attached, at
deliver-all, explicit ack, ack wait 30 min, max deliver 25 and no inactivity threshold, so nothing
reaps it while a seat is between owners (FL-77). The holder binds to it after the acquire hook
(FL-79) and fetches one message when it is ready to run it: no prefetch. Detaching is
non-destructive (consumer and cursor survive): :meth:`Mailbox.detach` NAKs whatever this holder
fetched and did not finish, so the successor gets exactly what the loser never acked — a NAK of the
original delivery, never a republish (FL-67).

Every ack, NAK, keepalive and dead-letter is fenced: JetStream accepts a late ack from anyone who
has the reply subject, so before sending one the mailbox asks the fence whether the epoch it was
attached under still holds the seat; a refused action is not sent and is logged
``inbox_ack_fenced`` (ours). In a fenced release (FL-66) this leaves the in-flight delivery
unacked; the broker redelivers it to the successor, with its original identity, after the ack wait.
Every fetch and every settled action is logged at debug (``inbox_fetched``, ``inbox_acked`` with
seat, epoch, stream sequence and the action), so a fleet's history can be checked after a run.

Handler outcomes (FL-81, FL-82): return = ack; raise = NAK with a delay (1 s doubling to 30 s,
CO-7); :class:`Deferred` = NAK at once and pause fetching (the wrong node: the resume edge restarts
it); a failure on the last allowed delivery is published to the seat's dead-letter subject on
``CREWLET_DLQ`` with the reason, then terminated (fleet.md §28 item 5).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from shared import logs

from ._envelope import Envelope
from ._errors import BusUnavailable, MailboxDetached, MailboxFenced, PublishOutcomeUnknown
from ._names import dlq_subject

__all__ = ["Deferred", "Delivery", "Fence", "Mailbox", "Outcome", "translate"]

_log = logs.get("bus.mailbox")

Fence = Callable[[str, int], bool]
"""``fence(handle, epoch) -> bool``: True while ``epoch`` still holds the seat (``SeatHost.holds``)."""

Outcome = Literal["empty", "acked", "nacked", "deferred", "dead_lettered", "fenced"]


class Deferred(Exception):  # noqa: N818 - a verdict a handler raises, not an error
    """Raised by a handler when this node is the wrong one to run the delivery (FL-81).

    The delivery is NAKed at once and the mailbox stops fetching until resumed.
    """


def translate(e: BaseException, what: str, *, write: bool) -> Exception:
    """Translate a nats-py error into the bus seam's (STYLE.md "Errors")."""
    if isinstance(e, nats.errors.TimeoutError | asyncio.TimeoutError):
        if write:
            return PublishOutcomeUnknown(f"{what}: no acknowledgement; it may have landed")
        return BusUnavailable(f"{what}: timed out")
    if isinstance(e, nats.js.errors.NoStreamResponseError | nats.errors.NoRespondersError):
        return BusUnavailable(f"{what}: no responders (election, or the stream is missing)")
    if isinstance(
        e,
        nats.errors.ConnectionClosedError
        | nats.errors.ConnectionReconnectingError
        | nats.errors.StaleConnectionError
        | nats.errors.OutboundBufferLimitError,
    ):
        if write:
            return PublishOutcomeUnknown(f"{what}: connection lost during the write")
        return BusUnavailable(f"{what}: connection lost")
    return BusUnavailable(f"{what}: {type(e).__name__}: {e}")


@dataclass
class Delivery:
    """One delivery of one inbox message to this holder.

    Attributes:
        handle: The seat.
        epoch: The epoch of the mailbox it was fetched through.
        data: The raw message bytes.
        envelope: The decoded envelope, or None when the bytes are not one (a poison message).
        headers: The message headers (``Nats-Msg-Id``, ``traceparent``...).
        msg_id: The publisher's ``Nats-Msg-Id``, or None.
        num_delivered: Which delivery of this message this is (1 = first; a NAK spends one).
        stream_seq: The message's stream sequence: its identity across redeliveries.
        settled: True once acked, NAKed or terminated through the mailbox.
    """

    handle: str
    epoch: int
    data: bytes
    envelope: Envelope | None
    headers: dict[str, str]
    msg_id: str | None
    num_delivered: int
    stream_seq: int
    settled: bool = False
    _msg: Msg | None = field(default=None, repr=False)


class Mailbox:
    """A seat's inbox as attached by its lease holder under one epoch (FL-79).

    Built by :meth:`shared.bus.Bus.attach`; not constructed directly.
    """

    def __init__(
        self,
        nc: Client,
        js: JetStreamContext,
        psub: JetStreamContext.PullSubscription,
        *,
        handle: str,
        epoch: int,
        group: str,
        topic: str,
        fence: Fence,
        max_deliver: int,
        ack_wait: float,
        fetch_timeout: float,
        nak_backoff: tuple[float, float],
    ) -> None:
        self._nc = nc
        self._js = js
        self._psub = psub
        self.handle = handle
        self.epoch = epoch
        self._group = group
        self._topic = topic
        self._fence = fence
        self._max_deliver = max_deliver
        self._ack_wait = ack_wait
        self._fetch_timeout = fetch_timeout
        self._backoff = nak_backoff
        self._outstanding: dict[int, Delivery] = {}
        self._fetch_lock = anyio.Lock()
        self._turn_lock = anyio.Lock()  # one handler at a time per seat (CO-7)
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._closing = False
        self._closed = False

    # -- state -------------------------------------------------------------------------------

    @property
    def detached(self) -> bool:
        """True once :meth:`detach` has run."""
        return self._closed

    @property
    def paused(self) -> bool:
        """True while fetching is paused (a deferral or a quiesced seat, FL-73, FL-81)."""
        return not self._resumed.is_set()

    def outstanding(self) -> list[Delivery]:
        """Deliveries fetched and not yet settled, oldest first."""
        return list(self._outstanding.values())

    def pause(self) -> None:
        """Stop fetching (the seat quiesced, or a delivery was deferred); recorded for :meth:`resume`."""
        self._resumed.clear()

    def resume(self) -> None:
        """Fetch again (the resume edge of a renew, FL-73)."""
        self._resumed.set()

    def _check(self, d: Delivery, action: str) -> Msg:
        if d._msg is None or d.handle != self.handle or d.epoch != self.epoch:
            raise ValueError(f"delivery of seat {d.handle} epoch {d.epoch} does not belong to this mailbox")
        if d.settled:
            raise ValueError(f"seat {self.handle}: delivery {d.stream_seq} is already settled")
        if not self._fence(self.handle, self.epoch):
            _log.warning(
                "inbox_ack_fenced", seat=self.handle, epoch=self.epoch, action=action, stream_seq=d.stream_seq
            )
            raise MailboxFenced(self.handle, self.epoch, action)
        return d._msg

    def _settle(self, d: Delivery) -> None:
        d.settled = True
        self._outstanding.pop(d.stream_seq, None)

    # -- fetching ----------------------------------------------------------------------------

    async def fetch(self, timeout: float | None = None) -> Delivery | None:
        """Fetch the next message, one at a time (no prefetch, FL-77).

        Args:
            timeout: Seconds to wait for a message (default: the bus's fetch timeout).

        Returns:
            The delivery; None when nothing arrived in time or fetching is paused.

        Raises:
            MailboxFenced: the epoch no longer holds the seat (nothing was fetched).
            MailboxDetached: the mailbox was detached.
            BusUnavailable: the broker could not be asked.
        """
        if self._closing:
            raise MailboxDetached(f"seat {self.handle}: mailbox detached")
        wait = self._fetch_timeout if timeout is None else timeout
        if self.paused:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._resumed.wait(), wait)
            if self.paused or self._closing:
                return None
        if not self._fence(self.handle, self.epoch):
            _log.warning("inbox_ack_fenced", seat=self.handle, epoch=self.epoch, action="fetch")
            raise MailboxFenced(self.handle, self.epoch, "fetch")
        async with self._fetch_lock:
            if self._closed:
                raise MailboxDetached(f"seat {self.handle}: mailbox detached")
            return await self._fetch_one(wait)

    async def _fetch_one(self, wait: float) -> Delivery | None:
        try:
            msgs = await self._psub.fetch(1, timeout=wait)
        except nats.errors.TimeoutError:
            return None
        except Exception as e:  # noqa: BLE001 - translated at the seam
            raise translate(e, f"fetch seat {self.handle}", write=False) from None
        msg = msgs[0]
        meta = msg.metadata
        headers = dict(msg.headers or {})
        try:
            envelope: Envelope | None = Envelope.decode(msg.data)
        except ValueError:
            envelope = None
        d = Delivery(
            handle=self.handle,
            epoch=self.epoch,
            data=bytes(msg.data),
            envelope=envelope,
            headers=headers,
            msg_id=headers.get("Nats-Msg-Id"),
            num_delivered=int(meta.num_delivered),
            stream_seq=int(meta.sequence.stream),
            _msg=msg,
        )
        self._outstanding[d.stream_seq] = d
        _log.debug(
            "inbox_fetched",
            seat=self.handle,
            epoch=self.epoch,
            stream_seq=d.stream_seq,
            num_delivered=d.num_delivered,
            msg_id=d.msg_id,
        )
        return d

    # -- settling ----------------------------------------------------------------------------

    async def ack(self, d: Delivery) -> None:
        """Acknowledge a finished delivery (waits for the server's confirmation).

        Raises:
            MailboxFenced: the epoch no longer holds the seat: the ack was not sent.
            BusUnavailable: no confirmation came (the ack may have landed).
        """
        msg = self._check(d, "ack")
        try:
            await msg.ack_sync(timeout=5.0)
        except Exception as e:  # noqa: BLE001
            raise translate(e, f"ack seat {self.handle} seq {d.stream_seq}", write=True) from None
        self._settle(d)
        _log.debug("inbox_acked", seat=self.handle, epoch=self.epoch, stream_seq=d.stream_seq, outcome="ack")

    async def nak(self, d: Delivery, delay: float | None = None) -> None:
        """Return a delivery to the broker for redelivery after ``delay`` seconds (None: at once).

        Counts as a delivery (FL-81). Never a republish (FL-67).

        Raises:
            MailboxFenced: the epoch no longer holds the seat: the NAK was not sent.
            BusUnavailable: the connection is down.
        """
        msg = self._check(d, "nak")
        try:
            await msg.nak(delay=delay)
        except Exception as e:  # noqa: BLE001
            raise translate(e, f"nak seat {self.handle} seq {d.stream_seq}", write=True) from None
        self._settle(d)
        _log.debug("inbox_acked", seat=self.handle, epoch=self.epoch, stream_seq=d.stream_seq, outcome="nak")

    async def in_progress(self, d: Delivery) -> None:
        """Tell the broker a long turn is still working on ``d``: restarts its ack wait.

        Raises:
            MailboxFenced: the epoch no longer holds the seat.
            BusUnavailable: the connection is down.
        """
        msg = self._check(d, "in_progress")
        try:
            await msg.in_progress()
        except Exception as e:  # noqa: BLE001
            raise translate(e, f"in_progress seat {self.handle} seq {d.stream_seq}", write=True) from None

    async def term(self, d: Delivery) -> None:
        """Terminate ``d``: the broker never redelivers it.

        Raises:
            MailboxFenced: the epoch no longer holds the seat.
            BusUnavailable: the connection is down.
        """
        msg = self._check(d, "term")
        try:
            await msg.term()
        except Exception as e:  # noqa: BLE001
            raise translate(e, f"term seat {self.handle} seq {d.stream_seq}", write=True) from None
        self._settle(d)
        _log.debug("inbox_acked", seat=self.handle, epoch=self.epoch, stream_seq=d.stream_seq, outcome="term")

    async def dead_letter(self, d: Delivery, reason: str) -> str:
        """Publish ``d`` with ``reason`` to the seat's dead-letter subject, then terminate it (FL-82).

        Returns:
            The dead-letter subject it was published to.

        Raises:
            MailboxFenced: the epoch no longer holds the seat: nothing was published.
            BusUnavailable: the publish or the terminate failed (a retry republishes under the
                same message id, which the stream collapses).
        """
        self._check(d, "dead_letter")
        subject = dlq_subject(self._topic, self._group)
        event: Any = d.envelope.to_dict() if d.envelope is not None else d.data.decode("utf-8", "replace")
        body = {
            "event": event,
            "reason": reason,
            "seat": self.handle,
            "group": self._group,
            "topic": self._topic,
            "num_delivered": d.num_delivered,
            "stream_seq": d.stream_seq,
            "msg_id": d.msg_id,
        }
        headers = {k: v for k, v in d.headers.items() if k.lower() in ("traceparent", "tracestate")}
        headers["Nats-Msg-Id"] = f"dlq:{self._group}:{d.stream_seq}"
        try:
            await self._js.publish(subject, json.dumps(body, separators=(",", ":")).encode(), headers=headers)
        except Exception as e:  # noqa: BLE001
            raise translate(e, f"dead-letter seat {self.handle} seq {d.stream_seq}", write=True) from None
        await self.term(d)
        _log.warning(
            "inbox_dead_lettered",
            seat=self.handle,
            epoch=self.epoch,
            stream_seq=d.stream_seq,
            subject=subject,
            num_delivered=d.num_delivered,
            reason=reason,
        )
        return subject

    def backoff(self, num_delivered: int) -> float:
        """NAK delay in seconds after a failed delivery: 1 s doubling to 30 s (CO-7)."""
        first, cap = self._backoff
        return float(min(cap, first * 2 ** max(0, num_delivered - 1)))

    @contextlib.asynccontextmanager
    async def keepalive(self, d: Delivery, *, every: float | None = None) -> AsyncIterator[None]:
        """Send ``in_progress`` every ``every`` seconds while the body runs (long turns, FL-83).

        Args:
            d: The delivery being worked on.
            every: Seconds between keepalives (default: a third of the ack wait, at most 60 s).
        """
        interval = every if every is not None else min(60.0, self._ack_wait / 3)

        async def beat() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await self.in_progress(d)
                except MailboxFenced:
                    return
                except (BusUnavailable, MailboxDetached):
                    if d.settled:
                        return

        task = asyncio.create_task(beat(), name=f"keepalive-{self.handle}")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def process(
        self, handler: Callable[[Delivery], Awaitable[None]], *, timeout: float | None = None
    ) -> Outcome:
        """Fetch one message and run ``handler`` on it with the three outcomes of FL-81/FL-82.

        Return = ack. :class:`Deferred` = NAK at once and pause (record it with the seat host's
        ``record_deferral`` so the next good renew resumes it, FL-73). Any other exception = NAK with
        :meth:`backoff`, or dead-letter and terminate when this was the last allowed delivery.
        Serial per seat (CO-7): concurrent calls on one mailbox run one handler at a time, and the
        next message is fetched only after the previous handler's delivery was settled.

        Returns:
            What happened: ``empty`` (nothing fetched), ``acked``, ``nacked``, ``deferred``,
            ``dead_lettered`` or ``fenced`` (the epoch lost the seat; logged, nothing sent).

        Raises:
            MailboxDetached: the mailbox was detached.
            BusUnavailable: the broker could not be asked.
        """
        async with self._turn_lock:
            return await self._process(handler, timeout)

    async def _process(
        self, handler: Callable[[Delivery], Awaitable[None]], timeout: float | None
    ) -> Outcome:
        try:
            d = await self.fetch(timeout)
        except MailboxFenced:
            return "fenced"
        if d is None:
            return "empty"
        last = d.num_delivered >= self._max_deliver
        try:
            try:
                await handler(d)
            except Deferred:
                if last:  # a NAK now would leave it with no delivery left: dead-letter instead
                    await self.dead_letter(d, "deferred on its last allowed delivery")
                    return "dead_lettered"
                await self.nak(d)
                self.pause()
                _log.info("inbox_deferred", seat=self.handle, epoch=self.epoch, stream_seq=d.stream_seq)
                return "deferred"
            except Exception as e:  # noqa: BLE001 - a handler failure is a NAK (FL-81)
                if last:
                    await self.dead_letter(d, f"{type(e).__name__}: {e}")
                    return "dead_lettered"
                await self.nak(d, delay=self.backoff(d.num_delivered))
                return "nacked"
            await self.ack(d)
            return "acked"
        except MailboxFenced:
            return "fenced"

    # -- detach ------------------------------------------------------------------------------

    async def detach(self) -> int:
        """Unbind: NAK what this holder fetched and did not finish, then unsubscribe (FL-66, FL-79).

        Waits for a fetch in flight to return (at most the fetch timeout), so nothing is left
        delivered to a subscription that no longer reads. When the fence refuses the NAKs (a
        fenced release) the deliveries stay unacked and return after the ack wait (FL-66, FL-83).
        Idempotent. Logs ``inbox_detached`` with seat, epoch, elapsed ms, NAKed and left counts.

        Returns:
            How many deliveries were NAKed back to the consumer.
        """
        if self._closed:
            return 0
        start = time.monotonic()
        self._closing = True
        self._resumed.set()
        nacked = left = 0
        async with self._fetch_lock:
            if self._closed:
                return 0
            self._closed = True
            while self._psub.pending_msgs > 0:  # arrived after a fetch gave up waiting
                try:
                    if await self._fetch_one(0.05) is None:
                        break
                except BusUnavailable:
                    break
            for d in self.outstanding():
                try:
                    await self.nak(d)
                    nacked += 1
                except (MailboxFenced, BusUnavailable):
                    left += 1
            with contextlib.suppress(Exception):
                await self._nc.flush(timeout=2)
            with contextlib.suppress(Exception):
                await self._psub.unsubscribe()
        _log.info(
            "inbox_detached",
            seat=self.handle,
            epoch=self.epoch,
            elapsed_ms=round((time.monotonic() - start) * 1000, 3),
            nacked=nacked,
            left=left,
        )
        return nacked
