"""Bus seam: streams, seat mailboxes and the inbox publish over JetStream (CO-6, CO-7, FL-76..FL-87).

Nothing above this seam imports nats for messaging: nats-py errors are translated into
:class:`BusError` subclasses here.
"""

from ._bus import ACK_WAIT, MAX_DELIVER, Bus, MailboxState, Published
from ._custody import CUSTODY_SUBJECT, Custodian, CustodySender
from ._delivery import DeadLetterHook, Deferred, Delivery, Fence, Grouping, Outcome, RetryLater
from ._envelope import Envelope, wake_envelope
from ._errors import (
    BusError,
    BusUnavailable,
    MailboxDetached,
    MailboxFenced,
    MessageTooLarge,
    PublishOutcomeUnknown,
    StreamMismatch,
    SubjectRefused,
)
from ._groups import CUSTODY_GROUP, GROUPS, REFLECT_GROUP, FleetGroup, attach_group, may_join
from ._mailbox import Mailbox
from ._names import (
    check_subject,
    control_group,
    control_subject,
    dlq_subject,
    durable_name,
    inbox_group,
    inbox_subject,
    namespace_stream,
)
from ._streams import AGENT_STREAM, CUSTODY_STREAM, DLQ_STREAM, STREAMS, StreamSpec, provision_streams

__all__ = [
    "ACK_WAIT",
    "AGENT_STREAM",
    "CUSTODY_GROUP",
    "CUSTODY_STREAM",
    "CUSTODY_SUBJECT",
    "DLQ_STREAM",
    "MAX_DELIVER",
    "STREAMS",
    "Bus",
    "BusError",
    "BusUnavailable",
    "Custodian",
    "CustodySender",
    "DeadLetterHook",
    "Deferred",
    "Delivery",
    "Envelope",
    "FleetGroup",
    "GROUPS",
    "REFLECT_GROUP",
    "Fence",
    "Grouping",
    "Mailbox",
    "MailboxDetached",
    "MailboxFenced",
    "MessageTooLarge",
    "MailboxState",
    "Outcome",
    "PublishOutcomeUnknown",
    "RetryLater",
    "Published",
    "StreamMismatch",
    "StreamSpec",
    "SubjectRefused",
    "attach_group",
    "check_subject",
    "control_group",
    "control_subject",
    "dlq_subject",
    "durable_name",
    "inbox_group",
    "inbox_subject",
    "may_join",
    "namespace_stream",
    "provision_streams",
    "wake_envelope",
]
