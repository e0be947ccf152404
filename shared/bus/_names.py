"""Subjects, streams, durable names and dead-letter subjects of the bus (FL-76, FL-80, CO-7).

Every name is derived from the org (FL-69), never from what this node happens to hold:

- inbox ``crewlet.agent.{handle}.inbox``, durable group ``agent-{handle}``;
- control ``crewlet.agent.{handle}.control``, group ``agent-{handle}-control``;
- a durable name is ``<group>__<topic>`` made readable (``.``, ``*``, ``>``, whitespace and path
  separators become ``_``), cut to 180 characters, then ``__`` and the first 12 hex characters of
  SHA-256 over ``group + "\\x00" + topic``, so names differing only in a rewritten character never
  share a consumer (FL-80);
- a dead-letter subject is ``dlq.<topic>.<group>.<same 12 hex>`` on ``CREWLET_DLQ`` (FL-80, FL-82).

Names are refused, never rewritten into something that could alias another (FL-76): an empty
handle yields no subject, and a subject with whitespace or an empty segment is refused.
"""

from __future__ import annotations

import hashlib
import re

from ._errors import SubjectRefused

__all__ = [
    "DURABLE_READABLE_MAX",
    "check_subject",
    "control_group",
    "control_subject",
    "dlq_subject",
    "durable_name",
    "inbox_group",
    "inbox_subject",
    "namespace_stream",
]

DURABLE_READABLE_MAX = 180
"""Characters of the readable part of a durable name, before ``__`` + 12 hex (fleet.md §25)."""

_UNSAFE = re.compile(r"[.*>\s/\\]")
_SEGMENT_UNSAFE = re.compile(r"[*>\s]")
_NAMESPACE = re.compile(r"^[a-z0-9_]+$")


def check_subject(subject: str, *, wildcards: bool = False) -> str:
    """Return ``subject`` if it is publishable, else raise.

    Args:
        subject: A NATS subject.
        wildcards: Allow ``*`` and ``>`` tokens (filters, not publishes).

    Raises:
        SubjectRefused: empty, whitespace, an empty segment, or a wildcard in a publish subject.
    """
    if not subject or any(ch.isspace() for ch in subject):
        raise SubjectRefused(f"subject {subject!r} is empty or contains whitespace")
    parts = subject.split(".")
    if any(not p for p in parts):
        raise SubjectRefused(f"subject {subject!r} has an empty segment")
    if not wildcards and any(p in ("*", ">") or "*" in p or ">" in p for p in parts):
        raise SubjectRefused(f"subject {subject!r} contains a wildcard")
    return subject


def _handle(handle: str) -> str:
    if not handle or "." in handle or _UNSAFE.search(handle):
        raise SubjectRefused(
            f"seat handle {handle!r} cannot name a subject (empty, '.', wildcard or whitespace)"
        )
    return handle


def inbox_subject(handle: str) -> str:
    """``crewlet.agent.{handle}.inbox`` (FL-76). Raises :class:`SubjectRefused` for a bad handle."""
    return f"crewlet.agent.{_handle(handle)}.inbox"


def control_subject(handle: str) -> str:
    """``crewlet.agent.{handle}.control`` (FL-70, FL-76). Raises :class:`SubjectRefused`."""
    return f"crewlet.agent.{_handle(handle)}.control"


def inbox_group(handle: str) -> str:
    """The inbox durable group ``agent-{handle}`` (FL-76)."""
    return f"agent-{_handle(handle)}"


def control_group(handle: str) -> str:
    """The control durable group ``agent-{handle}-control`` (FL-70)."""
    return f"agent-{_handle(handle)}-control"


def _digest(group: str, topic: str) -> str:
    return hashlib.sha256(f"{group}\x00{topic}".encode()).hexdigest()[:12]


def durable_name(group: str, topic: str) -> str:
    """The durable consumer name of ``group`` on ``topic`` (FL-80): readable, bounded, injective.

    Args:
        group: The consumer group (``agent-{handle}``).
        topic: The subject it consumes (``crewlet.agent.{handle}.inbox``).

    Returns:
        At most 180 readable characters + ``__`` + 12 hex characters.
    """
    readable = _UNSAFE.sub("_", f"{group}__{topic}")[:DURABLE_READABLE_MAX]
    return f"{readable}__{_digest(group, topic)}"


def _safe_segments(text: str) -> str:
    parts = [_SEGMENT_UNSAFE.sub("_", p) or "_" for p in text.split(".")]
    return ".".join(parts)


def dlq_subject(topic: str, group: str) -> str:
    """The dead-letter subject of ``group`` on ``topic`` (FL-80): ``dlq.<topic>.<group>.<12 hex>``."""
    return f"dlq.{_safe_segments(topic)}.{_safe_segments(group)}.{_digest(group, topic)}"


def namespace_stream(namespace: str) -> tuple[str, list[str]]:
    """The stream of another namespace: ``CREWLET_NS_<NS>`` over ``<ns>`` and ``<ns>.>`` (FL-76).

    Raises:
        SubjectRefused: the namespace does not match ``^[a-z0-9_]+$`` (refused, never rewritten,
            so two namespaces cannot alias).
    """
    if not _NAMESPACE.match(namespace):
        raise SubjectRefused(f"namespace {namespace!r} must match ^[a-z0-9_]+$")
    return f"CREWLET_NS_{namespace.upper()}", [namespace, f"{namespace}.>"]
