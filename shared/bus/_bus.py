"""The bus over JetStream: streams, every seat's mailbox, attach, and the inbox publish (CO-7, FL-76..FL-84).

:class:`Bus` rides the process's one connection (FL-2). Every node creates every seat's mailbox at
boot and on each apply, before anything publishes (FL-78): :meth:`Bus.ensure_mailboxes` creates the
inbox and control durables of every seat concurrently, because on a replicated stream each durable
is its own Raft group and costs ~60 ms to create (infra-facts S2). Only the lease holder attaches
(:meth:`Bus.attach`); deleting a mailbox is explicit and only for a decommissioned seat (FL-84).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from shared import logs

from ._delivery import DeadLetterHook, Fence, add_consumer, translate
from ._envelope import Envelope
from ._errors import BusUnavailable
from ._mailbox import Mailbox
from ._names import control_group, control_subject, durable_name, inbox_group, inbox_subject
from ._streams import AGENT_STREAM, STREAMS, provision_streams

__all__ = ["ACK_WAIT", "MAX_DELIVER", "Bus", "MailboxState", "Published"]

_log = logs.get("bus.mailbox")

ACK_WAIT = timedelta(minutes=30)
"""Mailbox ack wait (FL-77): a backstop only; a handover is a NAK (~1 ms)."""

MAX_DELIVER = 25
"""Mailbox delivery budget (FL-82), then the dead-letter subject."""


def _always(_handle: str, _epoch: int) -> bool:
    return True


@dataclass(frozen=True)
class Published:
    """The broker's answer to an inbox publish.

    Attributes:
        stream: The stream that stored it (``CREWLET_AGENT``).
        seq: Its stream sequence.
        duplicate: True when the stream collapsed it onto an earlier publish with the same
            ``Nats-Msg-Id`` (inside the duplicate window).
    """

    stream: str
    seq: int
    duplicate: bool


@dataclass(frozen=True)
class MailboxState:
    """A mailbox's counters as the broker reports them.

    Attributes:
        pending: Messages not yet delivered.
        ack_pending: Delivered and not yet acked (in a holder's hands or awaiting redelivery).
        redelivered: Messages delivered more than once and not yet acked.
    """

    pending: int
    ack_pending: int
    redelivered: int


class Bus:
    """Streams and seat mailboxes on JetStream (CO-7).

    Args:
        nc: The process's one connection.
        js: Its JetStream context.
        fence: ``fence(handle, epoch)`` every ack/NAK/fetch is checked against (``SeatHost.holds``);
            default: always true (single-process tests).
        max_deliver: Deliveries per message before the dead-letter subject (FL-82: 25).
        ack_wait: The mailbox ack wait (FL-77: 30 min).
        fetch_timeout: Seconds one :meth:`Mailbox.fetch` waits by default.
        nak_backoff: ``(first, cap)`` NAK delay in seconds after a failed delivery (CO-7: 1 s → 30 s).
        control: Also create each seat's control mailbox (FL-70, FL-78).
        concurrency: Consumer creates in flight at once.
    """

    def __init__(
        self,
        nc: Client,
        js: JetStreamContext,
        *,
        fence: Fence | None = None,
        max_deliver: int = MAX_DELIVER,
        ack_wait: timedelta = ACK_WAIT,
        fetch_timeout: float = 2.0,
        nak_backoff: tuple[float, float] = (1.0, 30.0),
        control: bool = True,
        concurrency: int = 64,
    ) -> None:
        self._nc = nc
        self._js = js
        self._fence: Fence = fence or _always
        self._max_deliver = max_deliver
        self._ack_wait = ack_wait.total_seconds()
        self._fetch_timeout = fetch_timeout
        self._nak_backoff = nak_backoff
        self._control = control
        self._concurrency = concurrency

    async def provision(self, *, replicas: int = 1, budget: float | None = None) -> None:
        """Create or adopt the bus streams (FL-76).

        Raises:
            StreamMismatch: an existing stream has another shape.
            BusUnavailable: a stream could not be created within its budget.
        """
        await provision_streams(self._js, replicas=replicas, budget=budget, streams=STREAMS)

    def consumer_config(self, group: str, topic: str) -> ConsumerConfig:
        """Return the mailbox consumer config of ``group`` on ``topic`` (FL-77).

        Deliver all, explicit ack, this bus's ack wait and delivery budget, filtered on ``topic``,
        and no inactivity threshold (nothing reaps a mailbox while its seat is between owners).
        """
        return ConsumerConfig(
            durable_name=durable_name(group, topic),
            description=f"mailbox {group} on {topic}",
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self._ack_wait,
            max_deliver=self._max_deliver,
            filter_subject=topic,
        )

    def _pairs(self, handle: str) -> list[tuple[str, str]]:
        pairs = [(inbox_group(handle), inbox_subject(handle))]
        if self._control:
            pairs.append((control_group(handle), control_subject(handle)))
        return pairs

    async def _create(self, group: str, topic: str, *, budget: float = 30.0) -> None:
        config = self.consumer_config(group, topic)
        await add_consumer(self._js, AGENT_STREAM, config, what=f"create mailbox {group}", budget=budget)

    async def ensure_mailboxes(self, handles: Iterable[str]) -> float:
        """Create (or adopt) every seat's inbox and control mailbox, concurrently (FL-77, FL-78).

        Idempotent: an existing durable with the same config is a no-op, one with another ack
        wait or delivery budget is updated. Call it at boot before claiming and on every apply,
        on every node, before anything publishes.

        Args:
            handles: Every agent seat of the company.

        Returns:
            Seconds it took.

        Raises:
            SubjectRefused: a handle cannot name a subject.
            BusUnavailable: a create failed or did not answer within 30 s.
        """
        start = time.monotonic()
        pairs = [p for h in dict.fromkeys(handles) for p in self._pairs(h)]
        gate = asyncio.Semaphore(self._concurrency)

        async def one(group: str, topic: str) -> None:
            async with gate:
                await self._create(group, topic)

        await asyncio.gather(*(one(g, t) for g, t in pairs))
        elapsed = time.monotonic() - start
        _log.info("mailboxes_ensured", consumers=len(pairs), elapsed_ms=round(elapsed * 1000, 3))
        return elapsed

    async def attach(
        self,
        handle: str,
        epoch: int,
        *,
        fence: Fence | None = None,
        on_dead_letter: DeadLetterHook | None = None,
    ) -> Mailbox:
        """Bind to ``handle``'s inbox as its lease holder under ``epoch`` (FL-79).

        Call it last in the acquire hook (FL-65). The mailbox is created if it is missing (a seat
        whose create failed at boot). Logs ``inbox_attached`` with seat, epoch and elapsed ms.

        Args:
            handle: The seat.
            epoch: The epoch the caller holds the seat under.
            fence: Overrides the bus's fence for this mailbox.
            on_dead_letter: Runs after each delivery this mailbox dead-letters (CO-8: the
                message reads ``dead_lettered``); None for nothing.

        Raises:
            SubjectRefused: the handle cannot name a subject.
            BusUnavailable: the broker could not be asked.
        """
        start = time.monotonic()
        group, topic = inbox_group(handle), inbox_subject(handle)
        name = durable_name(group, topic)
        try:
            await self._js.consumer_info(AGENT_STREAM, name)
        except nats.js.errors.NotFoundError:
            await self._create(group, topic)
        except Exception as e:  # noqa: BLE001
            raise translate(e, f"attach seat {handle}", write=False) from None
        try:
            psub = await self._js.pull_subscribe_bind(durable=name, stream=AGENT_STREAM)
        except Exception as e:  # noqa: BLE001
            raise translate(e, f"attach seat {handle}", write=False) from None
        box = Mailbox(
            self._nc,
            self._js,
            psub,
            handle=handle,
            epoch=epoch,
            group=group,
            topic=topic,
            fence=fence or self._fence,
            max_deliver=self._max_deliver,
            ack_wait=self._ack_wait,
            fetch_timeout=self._fetch_timeout,
            nak_backoff=self._nak_backoff,
            on_dead_letter=on_dead_letter,
        )
        _log.info(
            "inbox_attached", seat=handle, epoch=epoch, elapsed_ms=round((time.monotonic() - start) * 1000, 3)
        )
        return box

    async def state(self, handle: str) -> MailboxState:
        """The broker's counters for ``handle``'s inbox.

        Raises:
            BusUnavailable: the broker could not be asked (or the mailbox does not exist).
        """
        name = durable_name(inbox_group(handle), inbox_subject(handle))
        try:
            info = await self._js.consumer_info(AGENT_STREAM, name)
        except Exception as e:  # noqa: BLE001
            raise translate(e, f"mailbox state of seat {handle}", write=False) from None
        return MailboxState(
            int(info.num_pending or 0), int(info.num_ack_pending or 0), int(info.num_redelivered or 0)
        )

    async def retire(self, handle: str) -> None:
        """Delete a decommissioned seat's mailboxes (FL-84); the only path that deletes a consumer.

        Raises:
            BusUnavailable: the broker could not be asked.
        """
        for group, topic in self._pairs(handle):
            try:
                await self._js.delete_consumer(AGENT_STREAM, durable_name(group, topic))
            except nats.js.errors.NotFoundError:
                continue
            except Exception as e:  # noqa: BLE001
                raise translate(e, f"retire mailbox {group}", write=True) from None
        _log.info("mailbox_retired", seat=handle)

    async def publish_to_seat(
        self,
        handle: str,
        envelope: Envelope,
        *,
        msg_id: str | None = None,
        headers: dict[str, str] | None = None,
        control: bool = False,
    ) -> Published:
        """Publish ``envelope`` to a seat's inbox (or control subject), deduplicated (CO-7, FL-69).

        The subject comes from the org-derived handle, never from whether this node holds the seat.
        The stream collapses a repeat with the same ``Nats-Msg-Id`` inside its duplicate window.
        A W3C ``traceparent`` header is set from the envelope's trace context when it has one.

        Args:
            handle: The seat.
            envelope: The event.
            msg_id: The dedupe id (default: the envelope id).
            headers: Extra headers (trace context from the caller wins over the envelope's).
            control: Publish to ``crewlet.agent.{handle}.control`` instead of the inbox.

        Returns:
            Where it was stored.

        Raises:
            SubjectRefused: the handle cannot name a subject.
            PublishOutcomeUnknown: no acknowledgement came; publish again with the same id.
            BusUnavailable: the broker could not be asked (nothing was stored).
        """
        subject = control_subject(handle) if control else inbox_subject(handle)
        hdrs: dict[str, str] = {}
        if envelope.trace_id and envelope.span_id:
            hdrs["traceparent"] = f"00-{envelope.trace_id}-{envelope.span_id}-01"
        hdrs.update(headers or {})
        hdrs["Nats-Msg-Id"] = msg_id or envelope.id
        try:
            ack = await self._js.publish(subject, envelope.encode(), headers=hdrs, stream=AGENT_STREAM)
        except Exception as e:  # noqa: BLE001
            raise translate(e, f"publish to seat {handle}", write=True) from None
        if ack.seq is None:
            raise BusUnavailable(f"publish to seat {handle}: the stream answered without a sequence")
        return Published(ack.stream, int(ack.seq), bool(ack.duplicate))
