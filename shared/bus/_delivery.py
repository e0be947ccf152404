"""What a seat's mailbox hands its holder: deliveries, the handler verdicts, and error translation.

A :class:`Delivery` is one delivery of one inbox message to the seat's holder; a handler's verdict
on it (or on a group of them, CO-38) is a return (ack), :class:`Deferred` (this node is the wrong
one: NAK at once and pause, FL-81) or any other exception (NAK with backoff). nats-py errors are
translated into the bus seam's here (STYLE.md "Errors").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig

from ._envelope import Envelope
from ._errors import BusUnavailable, MessageTooLarge, PublishOutcomeUnknown

__all__ = [
    "DeadLetterHook",
    "Deferred",
    "Delivery",
    "Fence",
    "Grouping",
    "Outcome",
    "RetryLater",
    "add_consumer",
    "translate",
]

Fence = Callable[[str, int], bool]
"""``fence(handle, epoch) -> bool``: True while ``epoch`` still holds the seat (``SeatHost.holds``)."""

Outcome = Literal["empty", "acked", "nacked", "deferred", "dead_lettered", "fenced"]

DeadLetterHook = Callable[["Delivery", str], Awaitable[None]]
"""``on_dead_letter(delivery, reason)``: runs after a delivery went to its dead-letter subject and
was terminated (FL-82), e.g. to mark an API message ``dead_lettered`` (CO-8).

.. versionadded:: 0.1 (issue 14)"""

Grouping = Callable[[list["Delivery"]], Sequence[Sequence["Delivery"]]]
"""``group(batch) -> groups``: splits one drain into the groups one handler call each settles
(CO-38: by conversation). Every delivery should appear in exactly one group."""


class Deferred(Exception):  # noqa: N818 - a verdict a handler raises, not an error
    """Raised by a handler when this node is the wrong one to run the delivery (FL-81).

    The delivery is NAKed at once and the mailbox stops fetching until resumed.
    """


class RetryLater(Exception):  # noqa: N818 - a verdict a handler raises, not an error
    """Raised by a handler whose delivery cannot succeed before ``delay`` seconds have passed.

    NAKed like any failure, but with a delay of at least ``delay`` (e.g. every credential of the
    seat's providers is benched for that long, CO-42), so waiting out a known pause spends one
    delivery of the budget instead of one per backoff step (FL-82).

    Args:
        message: Why, for the log.
        delay: Seconds before the delivery can succeed; None for the ordinary backoff.
    """

    def __init__(self, message: str, *, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


def translate(e: BaseException, what: str, *, write: bool) -> Exception:
    """Translate a nats-py error into the bus seam's (STYLE.md "Errors").

    A message over the connection's payload limit (``MaxPayloadError``, raised before sending) or the
    stream's ``max_msg_size`` (JetStream 10054 "message size exceeds maximum allowed") is
    :class:`MessageTooLarge`, never a retryable unavailability.
    """
    if isinstance(e, nats.errors.MaxPayloadError):
        return MessageTooLarge(f"{what}: the message is over the broker's payload limit ({e})")
    if isinstance(e, nats.js.errors.APIError) and e.err_code == 10054:
        return MessageTooLarge(f"{what}: the message is over the stream's size limit ({e.description})")
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


async def add_consumer(
    js: JetStreamContext, stream: str, config: ConsumerConfig, *, what: str, budget: float
) -> None:
    """Create (or update) a durable consumer, re-asking while the broker has no answer yet.

    A timeout or "no responders" (a stream leader election, infra-facts N14) is retried every
    0.25 s for ``budget`` seconds; any other error returns at once (FL-28).

    Raises:
        BusUnavailable: the budget ran out, or the broker refused the create (``what`` names it).
    """
    deadline = time.monotonic() + budget
    while True:
        try:
            await js.add_consumer(stream, config)
            return
        except (
            nats.errors.TimeoutError,
            nats.js.errors.NoStreamResponseError,
            nats.errors.NoRespondersError,
        ) as e:
            if time.monotonic() > deadline:
                raise translate(e, what, write=False) from None
            await asyncio.sleep(0.25)
        except Exception as e:  # noqa: BLE001
            raise translate(e, what, write=False) from None


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
        pending: How many messages the consumer had never delivered when it delivered this one
            (redeliveries waiting out a NAK are not counted); a drain fetches on while it is > 0.
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
    pending: int = 0
    settled: bool = False
    _msg: Msg | None = field(default=None, repr=False)
