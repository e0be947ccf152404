"""The event envelope everything on the bus carries (CO-6).

One JSON object: ``id`` (UUID), ``type``, ``timestamp`` (UTC, RFC 3339), ``source``, ``payload``
(object), W3C trace context (``trace_id``, ``span_id``, ``parent_span_id``), delegation bookkeeping
(``delegation_depth``, ``parent_turn_id``, ``delegation_chain``), and where known ``turn_id``,
``work_key``, ``work_item``. Changes are additive only: unknown fields and unknown types
round-trip unchanged (rolling upgrades), and a decoded envelope re-encodes with exactly the keys it
arrived with — a field that was absent is not added on the way through.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["Envelope", "wake_envelope"]


def _now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class Envelope(BaseModel):
    """One event on the bus (CO-6). Build new ones with :meth:`new`.

    Attributes:
        id: The event id (a UUID string); the inbox publish's ``Nats-Msg-Id`` by default.
        type: The event type (``task_assigned``, ``external_notification``, ...); any string.
        timestamp: When the event happened, UTC RFC 3339 text (kept as written so it round-trips).
        source: Where it came from (``api``, ``webhook:<name>``, ``work``, ...).
        payload: The event body.
        trace_id: W3C trace id (32 hex), or None.
        span_id: W3C span id (16 hex) of the publishing span, or None.
        parent_span_id: The parent span id, or None.
        delegation_depth: How many delegations deep this event is (0 at the edge).
        parent_turn_id: The turn that caused it, or None.
        delegation_chain: Seat handles it passed through.
        turn_id: The turn it belongs to, when known.
        work_key: The unit of work (a redelivery reproduces it), when known.
        work_item: The tracker item (``ENG-12``), when known.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str = Field(min_length=1)
    type: str = Field(min_length=1)
    timestamp: str
    source: str = ""
    payload: dict[str, Any] = Field(default_factory=dict)
    trace_id: str | None = None
    span_id: str | None = None
    parent_span_id: str | None = None
    delegation_depth: int = 0
    parent_turn_id: str | None = None
    delegation_chain: list[str] = Field(default_factory=list)
    turn_id: str | None = None
    work_key: str | None = None
    work_item: str | None = None

    @field_validator("timestamp")
    @classmethod
    def _rfc3339(cls, value: str) -> str:
        text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"timestamp {value!r} is not RFC 3339") from None
        if parsed.tzinfo is None:
            raise ValueError(f"timestamp {value!r} has no UTC offset")
        return value

    @classmethod
    def new(cls, type: str, *, source: str, payload: dict[str, Any] | None = None, **fields: Any) -> Envelope:
        """Build a fresh envelope: a new UUID id and the current UTC time.

        Args:
            type: The event type.
            source: Where it came from.
            payload: The event body.
            **fields: Any other envelope field (``trace_id``, ``turn_id``, ...).

        Raises:
            pydantic.ValidationError: a field has the wrong shape.
        """
        return cls(
            id=str(fields.pop("id", uuid.uuid4())),
            type=type,
            timestamp=fields.pop("timestamp", _now_rfc3339()),
            source=source,
            payload=payload or {},
            **fields,
        )

    @property
    def at(self) -> datetime:
        """``timestamp`` as an aware UTC datetime (conversation order comes from it, FL-85)."""
        text = self.timestamp[:-1] + "+00:00" if self.timestamp.endswith(("Z", "z")) else self.timestamp
        return datetime.fromisoformat(text).astimezone(UTC)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: every field that was given (or decoded), plus unknown ones unchanged."""
        return self.model_dump(mode="json", exclude_unset=True)

    def encode(self) -> bytes:
        """Serialise to compact JSON bytes."""
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def decode(cls, raw: bytes | str) -> Envelope:
        """Parse JSON bytes; unknown fields and types are kept.

        Raises:
            ValueError: not JSON, not an object, or a known field with the wrong shape (pydantic's
                ``ValidationError`` is a ``ValueError``).
        """
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("an envelope is a JSON object")
        return cls.model_validate(data)


def wake_envelope(
    work_item: str,
    writer: str,
    *,
    parent_turn_id: str | None = None,
    reason: Literal["assigned", "commented", "mentioned"] = "assigned",
    comment_id: str | None = None,
    comment_text: str | None = None,
    conversation_key: str | None = None,
) -> Envelope:
    """A tracker wake: ``external_notification{source: work, reason, work_item}`` (CO-10, CO-41).

    Published to the woken seat's inbox by whoever wrote (a seat's tool call, an operator's API
    write, a webhook), at delegation depth 0: a hop through the tracker does not extend the
    delegation chain (CO-10); comment loops are bounded by the per-item wake limit instead (CO-41).

    The payload holds ``source: work``, ``reason``, ``work_item: {key}``, ``text`` (the comment's
    text for a comment wake, "" for an assignment), ``sender`` (the writer), and for
    ``commented``/``mentioned`` a ``comment: {id, body, author}`` object; ``conversation_key`` is
    set only when given. :meth:`shared.turns.Trigger.from_envelope` reads ``reason``,
    ``work_item``, ``text``, ``sender`` and ``conversation_key`` from it.

    .. versionchanged:: 0.1 ``reason``, ``comment_id``, ``comment_text`` and ``conversation_key``
       (issue 10, CO-41); the defaults build the same assignment wake as before.

    Args:
        work_item: The item's key (``SUP-1``).
        writer: Who wrote: a seat handle (``triage``), ``operator:<token id>``, or an external
            author (``github:<login>``).
        parent_turn_id: The writing turn, when a seat wrote it; None otherwise.
        reason: ``assigned`` (CO-10), ``commented`` (the seat is the item's assignee or a
            watcher) or ``mentioned`` (``@handle`` in the comment), CO-41.
        comment_id: The comment's id; required for ``commented`` and ``mentioned``.
        comment_text: The comment's text ("" when None).
        conversation_key: Groups the wake with other events of one conversation (a GitHub-linked
            item: ``github:<repository full name>#<number>``); None leaves the key unset, so the
            wake is its own conversation.

    Raises:
        ValueError: a comment wake without ``comment_id``, or an assignment wake with one.
    """
    commenting = reason in ("commented", "mentioned")
    if commenting and not comment_id:
        raise ValueError(f"a {reason!r} wake needs the comment's id")
    if not commenting and comment_id is not None:
        raise ValueError("an 'assigned' wake carries no comment")
    payload: dict[str, Any] = {
        "source": "work",
        "reason": reason,
        "work_item": {"key": work_item},
        "text": (comment_text or "") if commenting else "",
        "sender": writer,
    }
    if commenting:
        payload["comment"] = {"id": comment_id, "body": comment_text or "", "author": writer}
    if conversation_key:
        payload["conversation_key"] = conversation_key
    return Envelope.new(
        "external_notification",
        source="work",
        payload=payload,
        parent_turn_id=parent_turn_id,
        work_item=work_item,
        delegation_depth=0,
    )
