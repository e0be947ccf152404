"""Subjects, durable names and dead-letter subjects (FL-76, FL-80) and the envelope (CO-6)."""

from __future__ import annotations

import json

import pytest

from shared.bus import (
    Envelope,
    SubjectRefused,
    check_subject,
    control_group,
    control_subject,
    dlq_subject,
    durable_name,
    inbox_group,
    inbox_subject,
    namespace_stream,
)


def test_seat_subjects_and_groups() -> None:
    assert inbox_subject("eng-lead") == "crewlet.agent.eng-lead.inbox"
    assert control_subject("eng-lead") == "crewlet.agent.eng-lead.control"
    assert inbox_group("eng-lead") == "agent-eng-lead"
    assert control_group("eng-lead") == "agent-eng-lead-control"


@pytest.mark.parametrize("handle", ["", "a.b", "a b", "a*", "a>", "a\tb"])
def test_a_handle_that_cannot_name_a_subject_is_refused(handle: str) -> None:
    with pytest.raises(SubjectRefused):
        inbox_subject(handle)


@pytest.mark.parametrize("subject", ["", "a..b", ".a", "a.", "a b", "a.*", "a.>"])
def test_bad_publish_subjects_are_refused(subject: str) -> None:
    with pytest.raises(SubjectRefused):
        check_subject(subject)


def test_filters_may_carry_wildcards() -> None:
    assert check_subject("crewlet.agent.>", wildcards=True) == "crewlet.agent.>"


def test_durable_names_are_readable_bounded_and_injective() -> None:
    """FL-80 accept: topics ``a.b`` and ``a_b`` in one group get different durable names."""
    a, b = durable_name("g", "a.b"), durable_name("g", "a_b")
    assert a != b and a.startswith("g__a_b__") and b.startswith("g__a_b__")
    name = durable_name("agent-eng-lead", "crewlet.agent.eng-lead.inbox")
    assert name.startswith("agent-eng-lead__crewlet_agent_eng-lead_inbox__")
    assert not any(ch in name for ch in ".*> ")
    long = durable_name("agent-" + "x" * 300, "crewlet.agent." + "x" * 300 + ".inbox")
    readable, _, digest = long.rpartition("__")
    assert len(readable) == 180 and len(digest) == 12 and int(digest, 16) >= 0
    assert long != durable_name("agent-" + "x" * 300, "crewlet.agent." + "x" * 301 + ".inbox")


def test_dead_letter_subjects() -> None:
    subject = dlq_subject("crewlet.agent.eng-lead.inbox", "agent-eng-lead")
    head, digest = subject.rsplit(".", 1)
    assert head == "dlq.crewlet.agent.eng-lead.inbox.agent-eng-lead" and len(digest) == 12
    assert digest == durable_name("agent-eng-lead", "crewlet.agent.eng-lead.inbox")[-12:]
    odd = dlq_subject("a..b *", "g>")
    assert check_subject(odd) == odd


def test_namespaces_are_refused_never_rewritten() -> None:
    """FL-76 accept: publishing to a namespace ``a-b`` is refused."""
    assert namespace_stream("billing_v2") == ("CREWLET_NS_BILLING_V2", ["billing_v2", "billing_v2.>"])
    for bad in ("a-b", "A", "", "a.b"):
        with pytest.raises(SubjectRefused):
            namespace_stream(bad)


def test_an_envelope_round_trips_unknown_fields_and_types() -> None:
    """CO-6 check: unknown ``type`` and an extra top-level field decode and re-encode unchanged."""
    raw = {
        "id": "5b0c5f0e-8a1c-4c0e-9b7a-0a1b2c3d4e5f",
        "type": "from_a_newer_build",
        "timestamp": "2026-03-01T12:00:00.123456789Z",
        "source": "webhook:ci",
        "payload": {"nested": [1, {"x": None}]},
        "delegation_depth": 0,
        "future_field": {"a": 1},
    }
    env = Envelope.decode(json.dumps(raw).encode())
    assert env.type == "from_a_newer_build" and env.at.year == 2026
    assert json.loads(env.encode()) == raw


def test_a_new_envelope_has_an_id_and_utc_time() -> None:
    env = Envelope.new("external_notification", source="api", payload={"text": "hi"}, trace_id="a" * 32)
    again = Envelope.decode(env.encode())
    assert again == env and again.id and again.at.tzinfo is not None and again.trace_id == "a" * 32


@pytest.mark.parametrize(
    "raw",
    [
        b"[]",
        b"not json",
        b'{"id":"x","type":"t","timestamp":"yesterday"}',
        b'{"id":"x","type":"t","timestamp":"2026-01-01T00:00:00"}',
    ],
)
def test_malformed_envelopes_are_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        Envelope.decode(raw)
