"""An ask and its answer on the bus (CO-36, FL-124).

:func:`ask` opens the channel row and wakes the target with ``a2a_request``; :func:`answer` posts
the target's final artifact on the channel, closes it and wakes the asker with ``a2a_message``.
Both are idempotent per channel: the row is created only if absent and each envelope goes out under
a ``Nats-Msg-Id`` derived from the channel id (``a2a:<channel>:request``, ``a2a:<channel>:answer``),
so a repeat inside the stream's duplicate window is stored once.

**Envelopes** (CO-6). ``a2a_request``: ``source: a2a``, ``delegation_depth`` = the asker's + 1,
``delegation_chain`` = the asker's chain with the requester appended (top level and in the payload,
where :class:`shared.turns.Trigger` keeps it), ``parent_turn_id`` = the asking turn, payload
``{source, text, brief, sender, reply_mode: engine, channel_id, delegation_chain, asked_by: {seat,
turn_id, work_item}}``. ``a2a_message``: the request's depth and chain (ours: the answer wakes
the asker one hop deeper than its ask, so two seats that ask each other again on every answer stop
at ``turn_engine.delegation_depth_limit`` after a few round trips instead of asking forever — the
tryout saw 258 channels in 30 s when the answer went back at the asker's own depth),
``parent_turn_id`` = the answering turn, payload ``{source, text, brief,
answer, outcome, sender, reply_mode: none, channel_id, work_item?}``; ``text`` quotes the brief and
the answer, so the asker's next prompt shows both whatever renders it.

Not guaranteed: a node that dies between the row's create and the request's publish leaves an open
channel nobody was woken for; the asker's redelivered turn re-publishes it, and otherwise the idle
sweep closes it after :data:`~shared.channels.IDLE_CLOSE`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from shared import logs, telemetry
from shared.bus import Bus, BusError, Envelope, PublishOutcomeUnknown
from shared.coordination import Coordination

from ._record import Channel, channel_id_for, close_channel, get_channel, open_channel, rfc3339
from ._scope import AskScope

__all__ = ["SOURCE", "answer", "answer_envelope", "ask", "request_envelope"]

_log = logs.get("channels")

SOURCE = "a2a"
"""The ``source`` of both envelopes (CO-6: a trigger type's source; ours)."""


def _headers(given: Mapping[str, str] | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    if given is None:
        telemetry.inject(headers)
    else:
        headers.update(given)
    return headers


async def _publish(bus: Bus, seat: str, env: Envelope, msg_id: str, headers: dict[str, str]) -> None:
    """Publish once, and once more on an unknown outcome (the same msg id collapses a repeat)."""
    try:
        await bus.publish_to_seat(seat, env, msg_id=msg_id, headers=dict(headers))
    except PublishOutcomeUnknown:
        await bus.publish_to_seat(seat, env, msg_id=msg_id, headers=dict(headers))


def request_envelope(channel: Channel) -> Envelope:
    """The ``a2a_request`` that wakes ``channel.target`` (shape: module docstring)."""
    text = (
        f"@{channel.requester} asks you (agent-to-agent ask, channel {channel.channel_id}):\n\n"
        f"{channel.brief}\n\n"
        f"Your final answer is sent back to @{channel.requester} as the reply."
    )
    payload: dict[str, Any] = {
        "source": SOURCE,
        "text": text,
        "brief": channel.brief,
        "sender": channel.requester,
        "reply_mode": "engine",
        "channel_id": channel.channel_id,
        "delegation_chain": list(channel.delegation_chain),
        "asked_by": {
            "seat": channel.requester,
            "turn_id": channel.asker_turn_id,
            "work_item": dict(channel.asker_work_item) if channel.asker_work_item else None,
        },
    }
    return Envelope.new(
        "a2a_request",
        source=SOURCE,
        payload=payload,
        delegation_depth=channel.delegation_depth,
        delegation_chain=list(channel.delegation_chain),
        parent_turn_id=channel.asker_turn_id or None,
    )


def answer_envelope(channel: Channel) -> Envelope:
    """The ``a2a_message`` that brings a closed channel's reply to ``channel.requester``.

    Raises:
        ValueError: the channel has no reply yet.
    """
    if channel.reply is None:
        raise ValueError(f"channel {channel.channel_id} has no reply to send")
    answered = channel.close_reason == "answered"
    head = (
        f"@{channel.target} answered your ask (channel {channel.channel_id})."
        if answered
        else f"@{channel.target} could not answer your ask (channel {channel.channel_id})."
    )
    text = f"{head}\n\nYour ask:\n{channel.brief}\n\n" + ("Answer:\n" if answered else "") + channel.reply
    payload: dict[str, Any] = {
        "source": SOURCE,
        "text": text,
        "brief": channel.brief,
        "answer": channel.reply,
        "outcome": channel.outcome,
        "sender": channel.target,
        "reply_mode": "none",
        "channel_id": channel.channel_id,
        "delegation_chain": list(channel.delegation_chain),
    }
    item = channel.asker_work_item
    key = item.get("key") if item else None
    fields: dict[str, Any] = {}
    if item and isinstance(key, str) and key:
        payload["work_item"] = dict(item)
        fields["work_item"] = key
    return Envelope.new(
        "a2a_message",
        source=SOURCE,
        payload=payload,
        delegation_depth=channel.delegation_depth,
        delegation_chain=list(channel.delegation_chain),
        parent_turn_id=channel.answer_turn_id,
        **fields,
    )


async def ask(
    scope: AskScope,
    *,
    requester: str,
    target: str,
    brief: str,
    asker_turn_id: str,
    work_item: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> tuple[Channel, bool]:
    """Open a channel and wake ``target`` with ``a2a_request`` (CO-36). The caller has validated
    the target and the depth cap (:mod:`shared.tools` ``a2a_ask``).

    Logs ``a2a_channel_opened`` (a new row) and ``a2a_message_sent{kind: request}``.

    Args:
        scope: The asking turn's scope.
        requester: The asking seat.
        target: The asked seat (an agent seat, not ``requester``).
        brief: What is asked.
        asker_turn_id: The asking turn.
        work_item: The asker's work item ``{"key", "id", "project"}`` the answer is charged to, or
            None.
        now: The open instant (aware); None for the current time.

    Returns:
        ``(channel, created)``. ``created`` False: the same turn (or its redelivery) already asked
        this; a closed channel is returned as it is (its reply included) and nothing is published,
        an open one has its request published again (collapsed by its msg id if already stored).

    Raises:
        CoordinationUnavailable: the store could not be asked (nothing was published).
        BusError: the request could not be published; the channel was closed ``failed`` (when the
            store allowed) so it does not linger.
    """
    at = now or datetime.now(UTC)
    stamp = rfc3339(at)
    chain = (*scope.delegation_chain, requester)
    draft = Channel(
        channel_id=channel_id_for(scope.work_key, requester, target, brief),
        requester=requester,
        target=target,
        brief=brief,
        opened_at=stamp,
        last_activity_at=stamp,
        message_count=1,
        asker_turn_id=asker_turn_id,
        asker_work_item=dict(work_item) if work_item else None,
        delegation_depth=scope.delegation_depth + 1,
        delegation_chain=chain,
    )
    channel, created = await open_channel(scope.coord, draft)
    if created:
        _log.info(
            "a2a_channel_opened",
            channel_id=channel.channel_id,
            requester=requester,
            target=target,
            delegation_depth=channel.delegation_depth,
            delegation_chain=list(chain),
            turn_id=asker_turn_id,
        )
    if channel.status == "closed":
        return channel, created
    await _send_request(scope, channel, at)
    return channel, created


async def _send_request(scope: AskScope, channel: Channel, at: datetime) -> None:
    """Publish ``channel``'s ``a2a_request`` to its target's inbox (CO-36); on a publish failure
    close the channel ``failed`` (best effort) and re-raise the :class:`BusError`."""
    target = channel.target
    env = request_envelope(channel)
    try:
        await _publish(
            scope.bus, target, env, f"a2a:{channel.channel_id}:request", _headers(scope.trace_headers)
        )
    except BusError as e:
        _log.warning("a2a_request_failed", channel_id=channel.channel_id, target=target, error=str(e))
        try:
            await close_channel(
                scope.coord, channel.channel_id, reason="failed", now=at, outcome="unsent", reply=None
            )
        except Exception as close_error:  # noqa: BLE001 - the publish failure is what the caller needs
            _log.warning("a2a_channel_close_failed", channel_id=channel.channel_id, error=str(close_error))
        raise
    _log.info(
        "a2a_message_sent",
        channel_id=channel.channel_id,
        kind="request",
        sender=channel.requester,
        recipient=target,
        event_id=env.id,
        delegation_depth=channel.delegation_depth,
    )


async def answer(
    coord: Coordination,
    bus: Bus,
    channel_id: str,
    *,
    reply: str,
    answered: bool,
    answer_turn_id: str,
    outcome: str,
    now: datetime | None = None,
) -> Channel | None:
    """Post the target's reply on the channel, close it, wake the requester with ``a2a_message``.

    The close is a compare-and-set (:func:`shared.channels.close_channel`): exactly one of an
    answer and the idle sweep wins. The ``a2a_message`` is published only by the winner, under
    ``a2a:<channel>:answer``. Logs ``a2a_message_sent{kind: answer}`` and
    ``a2a_channel_closed{reason}``; a channel already closed is logged ``a2a_reply_dropped``.

    Args:
        coord: The coordination store.
        bus: The node's bus.
        channel_id: The channel the answering trigger carried.
        reply: The final artifact, or the note saying why there is none.
        answered: True for an answer (reason ``answered``), False for a turn that ended without
            one (reason ``failed``).
        answer_turn_id: The target's turn.
        outcome: That turn's outcome.
        now: The close instant (aware); None for the current time.

    Returns:
        The closed channel, or None when it was absent or already closed (nothing published).

    Raises:
        CoordinationUnavailable: the store could not be asked or the close's outcome is unknown.
        ChannelRecordInvalid: the row cannot be read.
        BusError: the channel closed but the requester could not be woken (the reply stays on
            the row).
    """
    at = now or datetime.now(UTC)
    closed = await close_channel(
        coord,
        channel_id,
        reason="answered" if answered else "failed",
        now=at,
        reply=reply,
        answer_turn_id=answer_turn_id,
        outcome=outcome,
    )
    if closed is None:
        existing = await get_channel(coord, channel_id)
        _log.warning(
            "a2a_reply_dropped",
            channel_id=channel_id,
            turn_id=answer_turn_id,
            reason="no such channel" if existing is None else f"closed ({existing.close_reason})",
        )
        return None
    _log.info(
        "a2a_channel_closed",
        channel_id=channel_id,
        reason=closed.close_reason,
        requester=closed.requester,
        target=closed.target,
        message_count=closed.message_count,
    )
    env = answer_envelope(closed)
    await _publish(bus, closed.requester, env, f"a2a:{channel_id}:answer", _headers(None))
    _log.info(
        "a2a_message_sent",
        channel_id=channel_id,
        kind="answer",
        sender=closed.target,
        recipient=closed.requester,
        event_id=env.id,
        outcome=outcome,
    )
    return closed
