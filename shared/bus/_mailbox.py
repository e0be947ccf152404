"""Seat mailboxes: one durable pull consumer per seat, attached only by the lease holder (FL-77..FL-84).

The mailbox is the consumer, not the connection reading it: created with nothing attached, at
deliver-all, explicit ack, ack wait 30 min, max deliver 25 and no inactivity threshold, so nothing
reaps it while a seat is between owners (FL-77). The holder binds to it after the acquire hook
(FL-79) and fetches one message, or one drain batch (CO-38), when it is ready to run it: no
prefetch. Detaching is non-destructive (consumer and cursor survive): :meth:`Mailbox.detach` NAKs
whatever this holder fetched and did not finish, so the successor gets exactly what the loser never
acked — a NAK of the original delivery, never a republish (FL-67).

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

Inbox coalescing (CO-38) is :meth:`Mailbox.process_batch`: one drain (what is available, plus an
optional window, up to a batch size) is split into groups by the caller, and each group is one
handler call whose verdict applies to every delivery in it. A :class:`Deferred` from any group
defers every delivery of the batch not yet settled (one delivery spent each, never an ack), so a
refusal never burns the budget lap after lap and never acks mail this node did not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from shared import logs

from . import _verdicts
from ._delivery import DeadLetterHook, Delivery, Fence, Grouping, Outcome, translate
from ._envelope import Envelope
from ._errors import BusUnavailable, MailboxDetached, MailboxFenced
from ._names import dlq_subject

__all__ = ["Mailbox"]

_log = logs.get("bus.mailbox")

_DRAIN_FETCH_TIMEOUT = 1.0
"""Seconds a drain fetch waits for messages the consumer said are pending (they are already there:
the wait only bounds a race with another binding during a handover)."""

_REDELIVERY_PROBE = 0.1
"""Seconds one extra drain fetch waits after a redelivery. The consumer's pending count leaves out
redeliveries, and a batch deferred by a peer comes back as redeliveries all at once, so one short
look keeps a handed-over conversation together (CO-38); it is paid only when a redelivery came."""

RETURN_DELAY = 0.001
"""Seconds of the delay a NAK "at once" carries (FL-81, FL-129, issue 17). A plain ``-NAK`` only
queues the message for redelivery in the server's memory: when the broker restarts before a fetch
takes it (a single node's embedded broker stops with the node at the end of a drain), the restored
consumer still dates the delivery from when it was handed out and redelivers it only after the
whole ack wait (30 min), while later messages overtake it. A NAK with a delay re-dates the pending
delivery in the consumer's stored state, so the next incarnation fetches it first, at once.
Measured on nats-server 2.15.1: a plain NAK then a restart, the message is not redelivered within
3 s (ack wait 1800 s); ``nak(delay=0.001)`` then a restart, it is the first message fetched."""


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
        on_dead_letter: DeadLetterHook | None = None,
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
        self._on_dead_letter = on_dead_letter
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
    def max_deliver(self) -> int:
        """How many deliveries a message gets before it is dead-lettered (FL-82)."""
        return self._max_deliver

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

        Counts as a delivery (FL-81). Never a republish (FL-67). "At once" is a NAK with
        :data:`RETURN_DELAY`, so the return survives a broker restart (issue 17).

        Raises:
            MailboxFenced: the epoch no longer holds the seat: the NAK was not sent.
            BusUnavailable: the connection is down.
        """
        msg = self._check(d, "nak")
        try:
            await msg.nak(delay=RETURN_DELAY if delay is None or delay < RETURN_DELAY else delay)
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

        Then the attach's ``on_dead_letter`` hook runs (e.g. the message's status becomes
        ``dead_lettered``, CO-8); a hook that fails is logged ``dead_letter_hook_failed`` and
        never undoes the dead letter.

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
        if self._on_dead_letter is not None:
            try:
                await self._on_dead_letter(d, reason)
            except Exception as e:  # noqa: BLE001 - the letter stands whatever the hook does
                _log.warning(
                    "dead_letter_hook_failed",
                    seat=self.handle,
                    stream_seq=d.stream_seq,
                    error=f"{type(e).__name__}: {e}",
                )
        return subject

    def backoff(self, num_delivered: int) -> float:
        """NAK delay in seconds after a failed delivery: 1 s doubling to 30 s (CO-7)."""
        first, cap = self._backoff
        return float(min(cap, first * 2 ** max(0, num_delivered - 1)))

    @contextlib.asynccontextmanager
    async def keepalive(self, *deliveries: Delivery, every: float | None = None) -> AsyncIterator[None]:
        """Send ``in_progress`` for each delivery every ``every`` seconds while the body runs (FL-83).

        Covers every delivery this holder keeps while a long turn runs: the turn's own, and the
        rest of a drain batch waiting behind it (CO-38). A delivery settled meanwhile is skipped.

        Args:
            *deliveries: The deliveries being held.
            every: Seconds between keepalives (default: a third of the ack wait, at most 60 s).

        .. versionchanged:: 0.1 Many deliveries (issue 10, CO-38); was one.
        """
        interval = every if every is not None else min(60.0, self._ack_wait / 3)
        held = list(deliveries)

        async def beat() -> None:
            while True:
                await asyncio.sleep(interval)
                for d in held:
                    if d.settled:
                        continue
                    try:
                        await self.in_progress(d)
                    except MailboxFenced:
                        return
                    except (BusUnavailable, MailboxDetached, ValueError):
                        continue  # settled meanwhile, or the next beat may get through
                if all(d.settled for d in held):
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
