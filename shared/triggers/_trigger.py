"""What woke a seat, and the identity of the work it asks for (CO-6, CO-19, CO-38).

A :class:`Trigger` is the turn engine's view of a delivery: its type and source, the text, the
work item it names, who sent it, how a reply is owed, the delegation bookkeeping and the W3C
trace context to continue. :func:`work_key` hashes the sorted constituent event ids, so a
redelivery (or a re-run after a fix) reproduces the key while each execution gets a new
``turn_id`` (CO-19).

Inbox coalescing (CO-38) is two pure functions here: :func:`partition` groups what one drain
fetched by conversation key (a trigger without one is a conversation of its own), oldest
conversation first; :func:`merge_triggers` turns one group into the single trigger its one turn
runs on, carrying every constituent (:attr:`Trigger.constituent_ids`, :attr:`Trigger.parts`) and
the strongest reply obligation. Order always comes from the event timestamps, never from the
broker (FL-85: a redelivery comes back behind newer mail).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

__all__ = [
    "FIRST_LINE_MAX_CHARS",
    "ReplyMode",
    "Trigger",
    "first_line",
    "merge_triggers",
    "partition",
    "work_key",
]

FIRST_LINE_MAX_CHARS = 200
"""``trigger.first_line`` is cut to this many characters (ours: it becomes a work item title)."""

ReplyMode = Literal["none", "tool", "engine"]
"""How a reply is owed (section 10): ``engine`` stores the final text as the reply (CO-8)."""

_HEX = frozenset("0123456789abcdef")

_REPLY_RANK: dict[str, int] = {"none": 0, "tool": 1, "engine": 2}
"""How strong an obligation is (CO-31): a merged trigger owes what its strongest constituent owes."""

_OLDEST = datetime.min.replace(tzinfo=UTC)

T = TypeVar("T")


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
        type: ``external_notification``, ``task_assigned``, ``a2a_request``, ``a2a_message`` (CO-36), ...
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
        constituent_ids: The event ids the turn stands for (a merged batch, CO-38), in timestamp
            order; empty means ``(event_id,)``.
        payload: The envelope's payload, as received (a merged trigger: its oldest constituent's).
        parts: The constituent triggers of a merged one, in timestamp order (CO-38); empty for a
            trigger that stands for one event.

    .. versionchanged:: 0.1 ``parts``; ``constituent_ids`` filled by :func:`merge_triggers`
       (issue 10, CO-38).
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
    parts: tuple[Trigger, ...] = ()

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

    @property
    def at(self) -> datetime | None:
        """:attr:`timestamp` as an aware UTC datetime; None when it is blank or not RFC 3339."""
        text = self.timestamp
        if not text:
            return None
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            return None
        return parsed.astimezone(UTC) if parsed.tzinfo is not None else None

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


def _order(items: Sequence[Trigger | None]) -> list[int]:
    """Indexes of ``items`` in event-time order (FL-85); unknown times first, ties in the given order."""

    def key(i: int) -> tuple[datetime, int]:
        t = items[i]
        return ((t.at if t is not None else None) or _OLDEST, i)

    return sorted(range(len(items)), key=key)


def partition(items: Sequence[T], trigger_of: Callable[[T], Trigger | None]) -> list[list[T]]:
    """Group one drain's ``items`` by conversation, oldest conversation first (CO-38, FL-85).

    Items whose trigger carries the same ``conversation_key`` (webhook sources derive one; an API
    caller may give one) form one group. A trigger without a key is a conversation of its own,
    keyed by its event id, so two copies of one event in one fetch fall into one group (CO-11
    step 1: same-id duplicates inside one fetch are dropped, by :func:`merge_triggers`). An item
    with no trigger (an undecodable body) is always a group of its own.

    Inside a group items are in event-timestamp order; groups are ordered by their oldest
    item. Items with no usable timestamp sort first, and ties keep the given (broker) order.

    Args:
        items: What one fetch returned (deliveries, or triggers themselves), in broker order.
        trigger_of: The trigger an item carries, or None when it carries none.

    Returns:
        Every item exactly once, as a list of non-empty groups.
    """
    triggers = [trigger_of(item) for item in items]
    groups: dict[tuple[str, str], list[T]] = {}
    for i in _order(triggers):
        t = triggers[i]
        if t is None:
            key = ("item", str(i))
        elif t.conversation_key:
            key = ("conversation", t.conversation_key)
        else:
            key = ("event", t.event_id)
        groups.setdefault(key, []).append(items[i])
    return list(groups.values())  # first insertion = oldest item: the groups are in age order


def _heading(n: int, total: int, t: Trigger) -> str:
    facts = [f"{n} of {total}"]
    if t.timestamp:
        facts.append(t.timestamp)
    if t.sender:
        facts.append(f"from {t.sender}")
    if t.type != "external_notification":
        facts.append(t.type)
    return "--- message " + " · ".join(facts) + " ---"


def merge_triggers(triggers: Sequence[Trigger]) -> Trigger:
    """Merge one conversation's triggers into the one trigger its one turn runs on (CO-38).

    Constituents are put in event-timestamp order (FL-85) and de-duplicated by event id (CO-11
    step 1); a trigger that is itself merged contributes its parts. One constituent is returned
    unchanged. Otherwise the merged trigger:

    - stands for every constituent: ``constituent_ids`` (so :attr:`Trigger.work_key` hashes
      them all and the ledger gets one row per constituent, FL-88) and ``parts``;
    - has the texts of all constituents in timestamp order, each under a ``--- message k of n
      ---`` heading naming its time and sender, so the model sees every message;
    - owes the strongest reply any constituent owes (``engine`` > ``tool`` > ``none``, CO-31);
    - takes the deepest ``delegation_depth`` (the depth cap is never relaxed by merging);
    - takes the newest ``work_item`` any constituent names (its facts are the freshest);
    - names every distinct sender, comma-separated;
    - keeps the oldest constituent's identity otherwise: ``event_id``, ``type``, ``source``,
      ``reason``, ``delivery_id``, trace context (the turn joins the oldest message's trace;
      the others are not linked), ``parent_turn_id``, ``timestamp`` and ``payload``.

    Args:
        triggers: One conversation's triggers (see :func:`partition`), in any order.

    Returns:
        The trigger for the turn.

    Raises:
        ValueError: ``triggers`` is empty.
    """
    flat: list[Trigger] = []
    for t in triggers:
        flat.extend(t.parts or (t,))
    seen: set[str] = set()
    parts: list[Trigger] = []
    for i in _order(flat):
        if flat[i].event_id not in seen:
            seen.add(flat[i].event_id)
            parts.append(flat[i])
    if not parts:
        raise ValueError("merging needs at least one trigger")
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    total = len(parts)
    intro = f"{total} messages"
    key = next((p.conversation_key for p in parts if p.conversation_key), None)
    if key:
        intro += f" in conversation {key}"
    blocks = [intro + ", oldest first:"]
    blocks += [f"{_heading(n, total, p)}\n{p.text or '(no text)'}" for n, p in enumerate(parts, 1)]
    senders = list(dict.fromkeys(p.sender for p in parts if p.sender))
    reply = max((p.reply_mode for p in parts), key=lambda mode: _REPLY_RANK.get(mode, 0))
    item = next((p.work_item for p in reversed(parts) if p.work_item), None)
    return Trigger(
        event_id=first.event_id,
        type=first.type,
        source=first.source,
        text="\n\n".join(blocks),
        reason=first.reason,
        sender=", ".join(senders),
        work_item=item,
        delivery_id=first.delivery_id,
        trace_headers=first.trace_headers,
        reply_mode=reply,
        delegation_depth=max(p.delegation_depth for p in parts),
        parent_turn_id=first.parent_turn_id,
        conversation_key=key,
        timestamp=first.timestamp,
        constituent_ids=tuple(p.event_id for p in parts),
        payload=first.payload,
        parts=tuple(parts),
    )
