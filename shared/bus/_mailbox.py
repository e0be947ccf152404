"""Seat mailboxes: one durable pull consumer per seat, attached only by the lease holder (FL-77..FL-84).

The mailbox is the consumer, not the connection reading it: created with nothing attached, at
deliver-all, explicit ack, ack wait 30 min, max deliver 25 and no inactivity threshold, so nothing
reaps it while a seat is between owners (FL-77). The holder binds to it after the acquire hook
(FL-79) and fetches one message, or one drain batch (CO-38), when it is ready to run it: no
prefetch. Detaching is non-destructive (consumer and cursor survive): :meth:`Mailbox.detach` NAKs
whatever this holder fetched and did not finish, so the successor gets exactly what the loser never
acked — a NAK of the original delivery, never a republish (FL-67). Every fetch is logged at debug
(``inbox_fetched``). Settling a delivery (the fenced ack, NAK, keepalive and dead letter) is
:class:`~shared.bus._settling.Settling`, the base of :class:`Mailbox`.

Handler outcomes (FL-81, FL-82): return = ack; raise = NAK with a delay (1 s doubling to 30 s,
CO-7); :class:`Deferred` = NAK at once and pause fetching (the wrong node: the resume edge restarts
it); a failure on the last allowed delivery is dead-lettered, then terminated (fleet.md §28 item 5).

Inbox coalescing (CO-38) is :meth:`Mailbox.process_batch`: one drain (what is available, plus an
optional window, up to a batch size) is split into groups by the caller, and each group is one
handler call whose verdict applies to every delivery in it (:mod:`shared.bus._verdicts`). A
:class:`Deferred` from any group defers every delivery of the batch not yet settled (one delivery
spent each, never an ack), so a refusal never burns the budget lap after lap and never acks mail
this node did not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import anyio
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from shared import logs

from . import _verdicts
from ._delivery import DeadLetterHook, Delivery, Fence, Grouping, Outcome, translate
from ._envelope import Envelope
from ._errors import BusUnavailable, MailboxDetached, MailboxFenced
from ._settling import Settling

__all__ = ["Mailbox"]

_log = logs.get("bus.mailbox")

_DRAIN_FETCH_TIMEOUT = 1.0
"""Seconds a drain fetch waits for messages the consumer said are pending (they are already there:
the wait only bounds a race with another binding during a handover)."""

_REDELIVERY_PROBE = 0.1
"""Seconds one extra drain fetch waits after a redelivery. The consumer's pending count leaves out
redeliveries, and a batch deferred by a peer comes back as redeliveries all at once, so one short
look keeps a handed-over conversation together (CO-38); it is paid only when a redelivery came."""


class Mailbox(Settling):
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
        on_dead_letter: DeadLetterHook | None = None,
    ) -> None:
        super().__init__(
            js,
            handle=handle,
            epoch=epoch,
            group=group,
            topic=topic,
            fence=fence,
            max_deliver=max_deliver,
            ack_wait=ack_wait,
            nak_backoff=nak_backoff,
            on_dead_letter=on_dead_letter,
        )
        self._nc = nc
        self._psub = psub
        self._fetch_timeout = fetch_timeout
        self._fetch_lock = anyio.Lock()
        self._turn_lock = anyio.Lock()  # one handler at a time per seat (CO-7)
        self._closing = False
        self._closed = False

    # -- state -------------------------------------------------------------------------------

    @property
    def detached(self) -> bool:
        """True once :meth:`detach` has run."""
        return self._closed

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

    async def fetch_batch(
        self, max_batch: int, *, timeout: float | None = None, window: float = 0.0
    ) -> list[Delivery]:
        """Fetch one drain batch: the next message, then what is available behind it (CO-38).

        Waits up to ``timeout`` for a first message. Then, for ``window`` seconds after it came,
        collects whatever else arrives; then drains what the consumer still says is pending
        (never-delivered messages), and, when the batch holds a redelivery, takes one short look
        (0.1 s) for other redeliveries ready now (a peer's deferred batch; one still waiting out
        its NAK delay is not waited for). It stops at ``max_batch`` deliveries or when the
        mailbox is being detached. With ``max_batch`` 1 this is :meth:`fetch`. Nothing is
        fetched ahead of the caller being ready to run it (FL-77: one drain batch, no prefetch).

        The window is not covered by keepalives: keep it well under the ack wait (it is at most
        60 s, CO-38; the ack wait is 30 min, FL-77).

        Args:
            max_batch: At most this many deliveries (>= 1).
            timeout: Seconds to wait for the first message (default: the bus's fetch timeout).
            window: Seconds to keep collecting after the first message (0: only what is there).

        Returns:
            The deliveries in broker order; empty when nothing arrived in time or fetching is
            paused.

        Raises:
            ValueError: ``max_batch`` < 1 or ``window`` < 0.
            MailboxFenced: the epoch no longer holds the seat (nothing was fetched).
            MailboxDetached: the mailbox was detached.
            BusUnavailable: the broker could not be asked (deliveries fetched before are kept
                outstanding: :meth:`detach` returns them).
        """
        if max_batch < 1 or window < 0:
            raise ValueError(f"max_batch {max_batch} must be >= 1 and window {window} >= 0")
        first = await self.fetch(timeout)
        if first is None:
            return []
        batch = [first]
        deadline = time.monotonic() + window
        probed = False
        async with self._fetch_lock:
            while len(batch) < max_batch and not (self._closing or self._closed):
                left = deadline - time.monotonic()
                if left > 0:
                    wait = left
                elif batch[-1].pending > 0:
                    wait = _DRAIN_FETCH_TIMEOUT
                elif not probed and any(d.num_delivered > 1 for d in batch):
                    wait, probed = _REDELIVERY_PROBE, True
                else:
                    break
                if not self._fence(self.handle, self.epoch):
                    break  # the fence refuses: settle what was fetched, fetch no more
                got = await self._fetch_msgs(max_batch - len(batch), wait)
                if not got and left <= 0:
                    break
                batch += got
        if len(batch) > 1:
            _log.debug(
                "inbox_drained",
                seat=self.handle,
                epoch=self.epoch,
                count=len(batch),
                stream_seqs=[d.stream_seq for d in batch],
            )
        return batch

    async def _fetch_one(self, wait: float) -> Delivery | None:
        got = await self._fetch_msgs(1, wait)
        return got[0] if got else None

    async def _fetch_msgs(self, n: int, wait: float) -> list[Delivery]:
        try:
            msgs = await self._psub.fetch(n, timeout=wait)
        except (TimeoutError, nats.errors.TimeoutError):
            # nats-py's batch fetch (n > 1) raises the bare asyncio timeout when nothing came; read as
            # a failure it dropped the loop for a second and, under load, a late delivery to that
            # request waited out the whole ack window before it was redelivered
            return []
        except Exception as e:  # noqa: BLE001 - translated at the seam
            raise translate(e, f"fetch seat {self.handle}", write=False) from None
        return [self._delivery(msg) for msg in msgs]

    def _delivery(self, msg: Msg) -> Delivery:
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
            pending=int(meta.num_pending or 0),
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

        async def one(group: list[Delivery]) -> None:
            await handler(group[0])

        outcomes = await self.process_batch(one, timeout=timeout)
        return outcomes[0] if outcomes else "empty"

    async def process_batch(
        self,
        handler: Callable[[list[Delivery]], Awaitable[None]],
        *,
        group: Grouping | None = None,
        max_batch: int = 1,
        window: float = 0.0,
        timeout: float | None = None,
    ) -> list[Outcome]:
        """Fetch one drain batch, split it with ``group``, and run ``handler`` once per group (CO-38).

        Groups run one after the other, in the order ``group`` gives, and each handler verdict
        applies to every delivery of its group (FL-81, FL-82):

        - return: every delivery of the group is acked;
        - any exception but :class:`Deferred`: each is NAKed with :meth:`backoff` of its own
          delivery count (dead-lettered when that was its last allowed delivery); the next group
          runs (keep consuming);
        - :class:`Deferred`: the group and **every later group** are NAKed at once (one delivery
          spent each; dead-lettered on a last allowed delivery), nothing is acked, fetching is
          paused (record it with the seat host's ``record_deferral``, FL-73), and no further
          group runs;
        - the fence refusing an ack or NAK: nothing more is sent, the rest stays unsettled for
          :meth:`detach` (or the ack wait) to return, and the batch ends ``fenced``.

        Serial per seat (CO-7): one batch at a time per mailbox; the next batch is fetched only
        after every group of this one was settled. A handler holding the seat for a long turn
        keeps the whole batch alive with ``keepalive(*mailbox.outstanding())``.

        Args:
            handler: Runs one group; return = ack all of it.
            group: Splits the batch into groups (None: one group per delivery). A delivery it
                leaves out runs alone after the groups; a repeated one runs only once.
            max_batch: At most this many deliveries per drain (1: no coalescing).
            window: Seconds to keep collecting after the first message (see :meth:`fetch_batch`).
            timeout: Seconds to wait for a first message.

        Returns:
            One outcome per group, in run order (``acked``, ``nacked``, ``deferred``,
            ``dead_lettered``, or ``fenced`` for the group the fence stopped); groups after a
            deferral are reported ``deferred`` with it; [] when nothing was fetched; ``["fenced"]``
            when the fetch itself was fenced.

        Raises:
            ValueError: ``max_batch`` < 1 or ``window`` < 0.
            MailboxDetached: the mailbox was detached.
            BusUnavailable: the broker could not be asked.
        """
        async with self._turn_lock:
            try:
                batch = await self.fetch_batch(max_batch, timeout=timeout, window=window)
            except MailboxFenced:
                return ["fenced"]
            if not batch:
                return []
            return await _verdicts.settle(self, batch, handler, group)

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
