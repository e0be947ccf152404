"""The channel record and its rows in the coordination store (CO-36, FL-124).

One row per channel in the ``channels`` slot (bucket ``crewlet_channels``, no age: FL-124), keyed by
the channel id, its value the JSON of :meth:`Channel.to_dict`. Every change after the create is a
compare-and-set at the revision read, so an answer and the idle sweep racing for one channel
cannot both close it: exactly one write lands, the loser re-reads and sees it closed.

The channel id is derived, not random (:func:`channel_id_for`): the asking turn's ``work_key``,
the requester, the target and the brief. A redelivered turn (same ``work_key``, CO-19) that asks
the same seat the same thing finds the row it opened the first time instead of opening a second
channel, and the request it publishes carries the same ``Nats-Msg-Id``, so the target is woken once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from shared import logs
from shared.coordination import Coordination, CoordinationUnavailable, Entry, OutcomeUnknown, RevisionConflict

from ._errors import ChannelRecordInvalid

__all__ = [
    "Channel",
    "ChannelStatus",
    "CloseReason",
    "channel_id_for",
    "close_channel",
    "get_channel",
    "list_channels",
    "open_channel",
    "rfc3339",
]

_log = logs.get("channels")

ChannelStatus = Literal["open", "closed"]
"""A channel is ``open`` from the ask until it is answered, fails or idles out; then ``closed``."""

CloseReason = Literal["answered", "failed", "idle"]
"""Why a channel closed: the target's turn answered, the target's turn failed without an answer,
or the sweep found it idle for :data:`~shared.channels.IDLE_CLOSE`."""

_CAS_ROUNDS = 8


def rfc3339(at: datetime) -> str:
    """``at`` (aware) as UTC RFC 3339 with microseconds and a ``Z``.

    Raises:
        ValueError: ``at`` is naive.
    """
    if at.tzinfo is None:
        raise ValueError("a channel time must be timezone-aware")
    return at.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _parse(text: str, key: str, name: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        raise ChannelRecordInvalid(key, f"{name} {text!r} is not RFC 3339", name) from None
    if parsed.tzinfo is None:
        raise ChannelRecordInvalid(key, f"{name} {text!r} has no UTC offset", name)
    return parsed.astimezone(UTC)


def channel_id_for(work_key: str, requester: str, target: str, brief: str) -> str:
    """The id of the channel an asking turn opens (CO-36; derived: see the module docstring).

    Args:
        work_key: The asking turn's ``work_key`` (CO-19); a redelivery reproduces it.
        requester: The asking seat's handle.
        target: The asked seat's handle.
        brief: The ask's text, as sent.

    Returns:
        ``ch_`` and 32 hex digits: a valid KV key and ``Nats-Msg-Id``.
    """
    digest = hashlib.sha256("\n".join((work_key, requester, target, brief)).encode("utf-8")).hexdigest()
    return "ch_" + digest[:32]


@dataclass(frozen=True)
class Channel:
    """One agent-to-agent channel (CO-36).

    Attributes:
        channel_id: See :func:`channel_id_for`.
        requester: The asking seat's handle.
        target: The asked seat's handle.
        brief: What was asked.
        status: ``open`` or ``closed``.
        message_count: Messages sent on the channel: 1 once the request is sent, 2 once answered.
        opened_at: UTC RFC 3339.
        last_activity_at: UTC RFC 3339 of the newest message or state change; the idle clock of
            the sweep (CO-36: closed after 1 h idle).
        closed_at: UTC RFC 3339, or None while open; the retention clock (deleted 7 days later).
        close_reason: See :data:`CloseReason`; None while open.
        asker_turn_id: The turn that asked.
        asker_work_item: The asker's work item ``{"key", "id", "project"}`` (``id`` may be None),
            the item the answering turn is charged to (CO-19 basis ``asked_by``); None for none.
        delegation_depth: The request's depth (the asker's plus one, CO-11).
        delegation_chain: The seats the request passed through, requester last.
        reply: The answer text once answered (or the failure note), else None.
        answer_turn_id: The target's turn that answered, else None.
        outcome: The answering turn's outcome (``delivered``, ``failed``, ...), else None.
        revision: The row's revision in the store when read; 0 for a record not stored yet.
    """

    channel_id: str
    requester: str
    target: str
    brief: str
    opened_at: str
    last_activity_at: str
    status: ChannelStatus = "open"
    message_count: int = 0
    closed_at: str | None = None
    close_reason: CloseReason | None = None
    asker_turn_id: str = ""
    asker_work_item: Mapping[str, Any] | None = None
    delegation_depth: int = 1
    delegation_chain: tuple[str, ...] = ()
    reply: str | None = None
    answer_turn_id: str | None = None
    outcome: str | None = None
    revision: int = field(default=0, compare=False)

    @property
    def last_activity(self) -> datetime:
        """:attr:`last_activity_at` as an aware UTC datetime."""
        return _parse(self.last_activity_at, self.channel_id, "last_activity_at")

    @property
    def closed(self) -> datetime | None:
        """:attr:`closed_at` as an aware UTC datetime, or None while open."""
        return None if self.closed_at is None else _parse(self.closed_at, self.channel_id, "closed_at")

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON object (every field but :attr:`revision`)."""
        out = dataclasses.asdict(self)
        out.pop("revision")
        out["delegation_chain"] = list(self.delegation_chain)
        out["asker_work_item"] = dict(self.asker_work_item) if self.asker_work_item is not None else None
        return out

    def encode(self) -> bytes:
        """:meth:`to_dict` as compact JSON bytes."""
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def from_entry(cls, entry: Entry) -> Channel:
        """Read a stored row.

        Raises:
            ChannelRecordInvalid: the row is not JSON, not an object, or a field has the wrong
                type (named in the error).
        """
        try:
            data = json.loads(entry.value)
        except ValueError:
            raise ChannelRecordInvalid(entry.key, "the row is not JSON") from None
        if not isinstance(data, dict):
            raise ChannelRecordInvalid(entry.key, "the row is not a JSON object")
        for name in ("channel_id", "requester", "target", "brief", "opened_at", "last_activity_at"):
            if not isinstance(data.get(name), str):
                raise ChannelRecordInvalid(entry.key, f"{name} must be a string", name)
        if data.get("status") not in ("open", "closed"):
            raise ChannelRecordInvalid(
                entry.key, f"status {data.get('status')!r} is not open|closed", "status"
            )
        known = {f.name for f in dataclasses.fields(cls)} - {"revision"}
        values = {k: v for k, v in data.items() if k in known}
        values["delegation_chain"] = tuple(str(h) for h in values.get("delegation_chain") or ())
        try:
            channel = cls(**values, revision=entry.revision)
        except TypeError as e:
            raise ChannelRecordInvalid(entry.key, str(e)) from None
        channel.last_activity  # noqa: B018 - refuse an unreadable clock at read time, not in the sweep
        return channel


async def get_channel(coord: Coordination, channel_id: str) -> Channel | None:
    """Return the channel ``channel_id``, or None when there is no such row.

    Raises:
        CoordinationUnavailable: the store could not be asked.
        ChannelRecordInvalid: the row cannot be read.
    """
    entry = await coord.get("channels", channel_id)
    return None if entry is None else Channel.from_entry(entry)


async def list_channels(coord: Coordination) -> list[Channel]:
    """Every channel row, in key order; an unreadable row is logged ``a2a_channel_invalid`` and left out.

    Raises:
        CoordinationUnavailable: the store could not be asked.
    """
    out: list[Channel] = []
    for entry in await coord.entries("channels"):
        try:
            out.append(Channel.from_entry(entry))
        except ChannelRecordInvalid as e:
            _log.warning("a2a_channel_invalid", channel_id=entry.key, error=str(e))
    return out


async def open_channel(coord: Coordination, channel: Channel) -> tuple[Channel, bool]:
    """Store a new channel row, create-only-if-absent.

    Args:
        coord: The coordination store.
        channel: The record to store (``revision`` is ignored).

    Returns:
        ``(stored, created)``: the stored row and True, or the row already under that id and False
        (the same turn, or its redelivery, asked the same seat the same thing: see
        :func:`channel_id_for`).

    Raises:
        CoordinationUnavailable: the store could not be asked, or a create's outcome is unknown and
            a re-read could not find the row.
    """
    try:
        revision = await coord.create("channels", channel.channel_id, channel.encode())
    except RevisionConflict:
        existing = await get_channel(coord, channel.channel_id)
        if existing is None:  # deleted between the create and the read: a 7-day-old row, try once more
            revision = await coord.create("channels", channel.channel_id, channel.encode())
            return dataclasses.replace(channel, revision=revision), True
        return existing, False
    except OutcomeUnknown:
        existing = await get_channel(coord, channel.channel_id)
        if existing is None:
            raise CoordinationUnavailable(
                f"channel {channel.channel_id}: the create's outcome is unknown and the row is absent"
            ) from None
        return existing, True
    return dataclasses.replace(channel, revision=revision), True


async def close_channel(
    coord: Coordination,
    channel_id: str,
    *,
    reason: CloseReason,
    now: datetime,
    reply: str | None = None,
    answer_turn_id: str | None = None,
    outcome: str | None = None,
    if_idle_since: datetime | None = None,
) -> Channel | None:
    """Close an open channel, compare-and-set at the revision read (CO-36).

    Args:
        coord: The coordination store.
        channel_id: The channel.
        reason: Why it closes.
        now: The close instant (aware).
        reply: The answer (or failure note) posted on closing; counts as one message. None posts
            nothing (the idle sweep).
        answer_turn_id: The target's answering turn, when one answered.
        outcome: That turn's outcome.
        if_idle_since: Close only if the channel's last activity is at or before this instant (the
            sweep's guard: a channel a message touched since the sweep read it stays open).

    Returns:
        The closed row, or None when this call closed nothing: no such row, already closed (by a
        peer's answer or sweep), or active since ``if_idle_since``.

    Raises:
        CoordinationUnavailable: the store could not be asked, or a write's outcome is unknown.
        ChannelRecordInvalid: the row cannot be read.
    """
    for _ in range(_CAS_ROUNDS):
        current = await get_channel(coord, channel_id)
        if current is None or current.status == "closed":
            return None
        if if_idle_since is not None and current.last_activity > if_idle_since:
            return None
        stamp = rfc3339(now)
        closed = dataclasses.replace(
            current,
            status="closed",
            closed_at=stamp,
            last_activity_at=stamp,
            close_reason=reason,
            message_count=current.message_count + (1 if reply is not None else 0),
            reply=reply if reply is not None else current.reply,
            answer_turn_id=answer_turn_id,
            outcome=outcome,
        )
        try:
            revision = await coord.update("channels", channel_id, closed.encode(), revision=current.revision)
        except RevisionConflict:
            continue
        except OutcomeUnknown as e:
            raise CoordinationUnavailable(
                f"channel {channel_id}: the close's outcome is unknown: {e}"
            ) from None
        return dataclasses.replace(closed, revision=revision)
    raise CoordinationUnavailable(f"channel {channel_id}: {_CAS_ROUNDS} compare-and-set rounds lost in a row")
