"""The bus seam's public API is pinned (STYLE.md "Modules and names")."""

import shared.bus


def test_public_api() -> None:
    assert sorted(shared.bus.__all__) == sorted(
        [
            "ACK_WAIT", "AGENT_STREAM", "DLQ_STREAM", "MAX_DELIVER", "STREAMS", "Bus", "BusError",
            "BusUnavailable", "DeadLetterHook", "Deferred", "Delivery", "Envelope", "Fence", "Grouping", "Mailbox", "MailboxDetached",
            "MailboxFenced", "MailboxState", "MessageTooLarge", "Outcome", "PublishOutcomeUnknown", "Published", "RetryLater", "StreamMismatch",
            "StreamSpec", "SubjectRefused", "check_subject", "control_group", "control_subject", "dlq_subject",
            "durable_name", "inbox_group", "inbox_subject", "namespace_stream", "provision_streams",
            "wake_envelope", "CUSTODY_GROUP", "CUSTODY_STREAM", "CUSTODY_SUBJECT", "Custodian", "CustodySender",
            "FleetGroup", "GROUPS", "REFLECT_GROUP", "attach_group", "may_join",
        ]
    )  # fmt: skip
    for name in shared.bus.__all__:
        assert hasattr(shared.bus, name)
