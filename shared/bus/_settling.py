"""Fenced settling of a seat mailbox's deliveries: ack, NAK, keepalive, dead letter (FL-81..FL-84).

Every ack, NAK, keepalive and dead-letter is fenced: JetStream accepts a late ack from anyone who
has the reply subject, so before sending one the mailbox asks the fence whether the epoch it was
attached under still holds the seat; a refused action is not sent and is logged
``inbox_ack_fenced`` (ours). In a fenced release (FL-66) this leaves the in-flight delivery
unacked; the broker redelivers it to the successor, with its original identity, after the ack wait.
Every settled action is logged at debug (``inbox_acked`` with seat, epoch, stream sequence and the
action), so a fleet's history can be checked after a run.

Returning work is a NAK of the original delivery, never a republish (FL-67); a NAK "at once" carries
:data:`RETURN_DELAY`. A failure on the last allowed delivery is published to the seat's dead-letter
subject on ``CREWLET_DLQ`` with the reason, then terminated (fleet.md §28 item 5). A NAK delay
after a failure is :meth:`Settling.backoff`: 1 s doubling to 30 s (CO-7).

:class:`Settling` is the base of :class:`~shared.bus.Mailbox` (which adds fetching and detaching);
the handler verdicts (:mod:`shared.bus._verdicts`) settle a batch through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from shared import logs

from ._delivery import DeadLetterHook, Delivery, Fence, translate
from ._errors import BusUnavailable, MailboxDetached, MailboxFenced
from ._names import dlq_subject

__all__ = ["RETURN_DELAY", "Settling"]

_log = logs.get("bus.mailbox")

RETURN_DELAY = 0.001
"""Seconds of the delay a NAK "at once" carries (FL-81, FL-129, issue 17). A plain ``-NAK`` only
queues the message for redelivery in the server's memory: when the broker restarts before a fetch
takes it (a single node's embedded broker stops with the node at the end of a drain), the restored
consumer still dates the delivery from when it was handed out and redelivers it only after the
whole ack wait (30 min), while later messages overtake it. A NAK with a delay re-dates the pending
delivery in the consumer's stored state, so the next incarnation fetches it first, at once.
Measured on nats-server 2.15.1: a plain NAK then a restart, the message is not redelivered within
3 s (ack wait 1800 s); ``nak(delay=0.001)`` then a restart, it is the first message fetched."""


class Settling:
    """A seat's inbox as its lease holder settles it under one epoch (FL-79, FL-81..FL-84).

    Holds what settling needs: the seat, the epoch and its fence, the deliveries fetched and not
    yet settled, the pause a deferral sets. Built as part of a :class:`~shared.bus.Mailbox`; not
    constructed directly.

    Args:
        js: The JetStream context dead letters are published on.
        handle: The seat's handle.
        epoch: The lease epoch the mailbox was attached under.
        group: The seat's consumer group (names the dead-letter subject).
        topic: The seat's topic (names the dead-letter subject).
        fence: Asked before every action whether ``epoch`` still holds the seat.
        max_deliver: Deliveries before a message is dead-lettered (FL-82).
        ack_wait: The consumer's ack wait in seconds (keepalives beat at a third of it).
        nak_backoff: ``(first, cap)`` seconds of the NAK delay after a failure (CO-7).
        on_dead_letter: Runs after a dead letter (e.g. the message's status, CO-8); None for none.
    """

    def __init__(
        self,
        js: JetStreamContext,
        *,
        handle: str,
        epoch: int,
        group: str,
        topic: str,
        fence: Fence,
        max_deliver: int,
        ack_wait: float,
        nak_backoff: tuple[float, float],
        on_dead_letter: DeadLetterHook | None = None,
    ) -> None:
        self._js = js
        self.handle = handle
        self.epoch = epoch
        self._group = group
        self._topic = topic
        self._fence = fence
        self._max_deliver = max_deliver
        self._ack_wait = ack_wait
        self._backoff = nak_backoff
        self._on_dead_letter = on_dead_letter
        self._outstanding: dict[int, Delivery] = {}
        self._resumed = asyncio.Event()
        self._resumed.set()

    # -- state -------------------------------------------------------------------------------

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
