"""Errors of the bus seam (see the tree in :mod:`shared.errors`).

nats-py errors are translated here and nowhere above this seam::

    BusError                        base of this seam
    ├── BusUnavailable              the broker could not be asked; retrying later is safe  (ServiceError)
    │   └── PublishOutcomeUnknown   a publish was sent and no ack came: it may be stored; a retry
    │                               with the same ``Nats-Msg-Id`` is collapsed by the stream
    ├── MessageTooLarge             over the payload limit: the same bytes fail again (UsageError, not retryable)
    ├── StreamMismatch              an existing stream has another shape than configured   (not retryable)
    ├── SubjectRefused              an empty handle, whitespace, an empty segment, a bad namespace (UsageError)
    ├── MailboxFenced               an ack/NAK/fetch under an epoch the seat no longer holds (not retryable)
    └── MailboxDetached             the mailbox was detached; attach again under a new grant  (UsageError)
"""

from __future__ import annotations

from shared.errors import CrewletError, ServiceError, UsageError

__all__ = [
    "BusError",
    "BusUnavailable",
    "MailboxDetached",
    "MailboxFenced",
    "MessageTooLarge",
    "PublishOutcomeUnknown",
    "StreamMismatch",
    "SubjectRefused",
]


class BusError(CrewletError):
    """Base of every failure of the bus seam."""


class BusUnavailable(BusError, ServiceError):
    """The broker could not be asked (no responders, timeout, connection lost). Retry later."""


class PublishOutcomeUnknown(BusUnavailable):
    """A publish was sent and no acknowledgement came: the message may be stored.

    Publishing again with the same ``Nats-Msg-Id`` is safe inside the stream's duplicate window.
    """


class MessageTooLarge(BusError, UsageError):
    """A publish the broker can never take: the message is over its payload limit (the connection's
    ``max_payload``, or the stream's ``max_msg_size``). Not retryable: the same bytes fail again
    (issue 35: it was reported as the broker being unavailable, so producers retried it).
    """

    retryable = False


class StreamMismatch(BusError):
    """An existing stream has another shape (retention, subjects, replicas, age) than configured.

    A booting node never rewrites an existing stream; the message names both values.
    """

    retryable = False


class SubjectRefused(BusError, UsageError):
    """A subject, handle or namespace was refused, never rewritten (FL-76)."""


class MailboxFenced(BusError):
    """An ack, NAK, keepalive, dead-letter or fetch under an epoch the seat no longer holds.

    JetStream accepts late acks, so the fence is ours: the action was not sent. The delivery stays
    with the broker, which hands it to the seat's current holder.

    Attributes:
        handle: The seat.
        epoch: The epoch the action was made under.
        action: ``ack``, ``nak``, ``in_progress``, ``term``, ``dead_letter`` or ``fetch``.
    """

    retryable = False

    def __init__(self, handle: str, epoch: int, action: str) -> None:
        self.handle = handle
        self.epoch = epoch
        self.action = action
        super().__init__(f"seat {handle}: {action} refused: epoch {epoch} no longer holds the seat")


class MailboxDetached(BusError, UsageError):
    """The mailbox was detached; a successor's mailbox is attached under a new grant."""
