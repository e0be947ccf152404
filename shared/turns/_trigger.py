"""What woke a seat, and the identity of the work it asks for (CO-6, CO-19).

A :class:`Trigger` is the turn engine's view of a delivery: its type and source, the text, the
work item it names, who sent it, how a reply is owed, the delegation bookkeeping and the W3C
trace context to continue. :func:`work_key` hashes the sorted constituent event ids, so a
redelivery (or a re-run after a fix) reproduces the key while each execution gets a new
``turn_id`` (CO-19).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["FIRST_LINE_MAX_CHARS", "ReplyMode", "Trigger", "first_line", "work_key"]

FIRST_LINE_MAX_CHARS = 200
"""``trigger.first_line`` is cut to this many characters (ours: it becomes a work item title)."""

ReplyMode = Literal["none", "tool", "engine"]
"""How a reply is owed (section 10): ``engine`` stores the final text as the reply (CO-8)."""

_HEX = frozenset("0123456789abcdef")


def first_line(text: str) -> str:
    """Return the first non-blank line of ``text``, stripped and cut to
    :data:`FIRST_LINE_MAX_CHARS` characters ("" for blank text)."""
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line[:FIRST_LINE_MAX_CHARS]
    return ""


def work_key(event_ids: Iterable[str]) -> str:
    """Return the ``work_key`` of a trigger made of ``event_ids`` (CO-19).

    The first 32 hex digits of SHA-256 over the sorted, de-duplicated ids joined by ``\\n``:
    order-free, so a merged batch redelivered in another order keeps its key.

    Raises:
        ValueError: ``event_ids`` is empty.
    """
    ids = sorted(set(event_ids))
    if not ids:
        raise ValueError("a work key needs at least one event id")
    return hashlib.sha256("\n".join(ids).encode("utf-8")).hexdigest()[:32]


def _traceparent(trace_id: Any, span_id: Any) -> dict[str, str]:
    if (
        isinstance(trace_id, str)
        and isinstance(span_id, str)
        and len(trace_id) == 32
        and len(span_id) == 16
        and set(trace_id + span_id) <= _HEX
    ):
        return {"traceparent": f"00-{trace_id}-{span_id}-01"}
    return {}


@dataclass(frozen=True)
class Trigger:
    """One delivery as a turn sees it (CO-6, CO-19).

    Attributes:
        event_id: The envelope id (UUID).
        type: ``external_notification``, ``task_assigned``, ``a2a_request`` (P1), ...
        source: ``api``, ``work``, ``webhook:<name>``, ``github``, ...
        text: The message or task text ("" for a tracker wake).
        reason: ``assigned`` for a tracker wake; "" otherwise.
        sender: Who sent it (an API sender, a GitHub login); "".
        work_item: The item the trigger names: at least ``{"key": "SUP-1"}``, optionally
            ``title``, ``status``, ``assignee``, ``comments``; None for none.
        delivery_id: The broker delivery / webhook delivery id; "".
        trace_headers: ``traceparent`` (and ``tracestate``) to continue; {} for a new trace.
        reply_mode: How a reply is owed.
        delegation_depth: Hops of delegation so far (CO-11).
        parent_turn_id: The turn whose write caused this one, or None.
        conversation_key: Groups API messages of one conversation, or None.
        timestamp: RFC 3339, UTC; "".
        constituent_ids: The event ids the turn stands for (a merged batch, P1); empty means
            ``(event_id,)``.
        payload: The envelope's payload, as received.
    """

    event_id: str
    type: str = "external_notification"
    source: str = "api"
    text: str = ""
    reason: str = ""
    sender: str = ""
    work_item: Mapping[str, Any] | None = None
    delivery_id: str = ""
    trace_headers: Mapping[str, str] = field(default_factory=dict)
    reply_mode: ReplyMode = "none"
    delegation_depth: int = 0
    parent_turn_id: str | None = None
    conversation_key: str | None = None
    timestamp: str = ""
    constituent_ids: tuple[str, ...] = ()
    payload: Mapping[str, Any] = field(default_factory=dict)

    @property
    def first_line(self) -> str:
        """The text's first non-blank line (see :func:`first_line`)."""
        return first_line(self.text)

    @property
    def work_item_key(self) -> str:
        """The named item's key, or ""."""
        key = self.work_item.get("key") if self.work_item else None
        return key if isinstance(key, str) else ""

    @property
    def event_ids(self) -> tuple[str, ...]:
        """The constituent event ids (at least ``event_id``)."""
        return self.constituent_ids or (self.event_id,)

    @property
    def work_key(self) -> str:
        """:func:`work_key` of :attr:`event_ids`."""
        return work_key(self.event_ids)

    @classmethod
    def from_envelope(
        cls, envelope: Mapping[str, Any], *, headers: Mapping[str, str] | None = None
    ) -> Trigger:
        """Read a CO-6 event envelope (unknown fields are ignored, never refused).

        Payload keys read: ``source`` (wins over the envelope's: CO-6 puts a notification's
        source in it), ``text``, ``reason``, ``sender``, ``work_item`` (a key or an object with
        ``key``), ``reply_mode``, ``conversation_key``, ``delivery_id``.

        Args:
            envelope: The decoded envelope.
            headers: The NATS message's headers; their ``traceparent`` wins over the
                envelope's ``trace_id``/``span_id``.

        Raises:
            ValueError: The envelope has no string ``id``.
        """
        event_id = envelope.get("id")
        if not isinstance(event_id, str) or not event_id:
            raise ValueError("an event envelope needs a string id")
        payload = envelope.get("payload") if isinstance(envelope.get("payload"), Mapping) else {}
        assert isinstance(payload, Mapping)

        def text(mapping: Mapping[str, Any], key: str) -> str:
            value = mapping.get(key)
            return value if isinstance(value, str) else ""

        item = payload.get("work_item", envelope.get("work_item"))
        work_item: Mapping[str, Any] | None
        if isinstance(item, str) and item:
            work_item = {"key": item}
        elif isinstance(item, Mapping) and isinstance(item.get("key"), str):
            work_item = dict(item)
        else:
            work_item = None
        trace_headers = {
            k: v for k, v in (headers or {}).items() if k.lower() in ("traceparent", "tracestate")
        }
        if "traceparent" not in {k.lower() for k in trace_headers}:
            trace_headers = _traceparent(envelope.get("trace_id"), envelope.get("span_id"))
        reply = text(payload, "reply_mode")
        depth = envelope.get("delegation_depth")
        return cls(
            event_id=event_id,
            type=text(envelope, "type") or "external_notification",
            source=text(payload, "source") or text(envelope, "source"),
            text=text(payload, "text"),
            reason=text(payload, "reason"),
            sender=text(payload, "sender"),
            work_item=work_item,
            delivery_id=text(payload, "delivery_id"),
            trace_headers=trace_headers,
            reply_mode=reply if reply in ("none", "tool", "engine") else "none",  # type: ignore[arg-type]
            delegation_depth=depth if isinstance(depth, int) and not isinstance(depth, bool) else 0,
            parent_turn_id=text(envelope, "parent_turn_id") or None,
            conversation_key=text(payload, "conversation_key") or None,
            timestamp=text(envelope, "timestamp"),
            payload=dict(payload),
        )
