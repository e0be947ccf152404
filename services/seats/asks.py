"""The seat side of agent-to-agent asks (CO-36, FL-124): what the dispatcher does around a turn.

- :func:`bound` binds the turn's :class:`shared.channels.AskScope` (the node's store and bus, the
  trigger's depth, chain and work item) around ``engine.run``, so the ``a2a_ask`` tool can ask.
- :func:`admit` is the authorisation read at intake (FL-124: the node holding the answering seat
  reads the channel record): an ``a2a_request`` whose channel is absent, closed or addressed to
  another seat is not run (``notification_skipped{reason: channel_closed}``); a store that cannot
  answer admits it (fails open, like the completion ledger, CO-11).
- :func:`answered` runs after an answering turn commits (ledger written, not redelivered): the
  turn's final artifact (:attr:`shared.turns.TurnResult.reply`, secrets masked) is posted on the
  channel, the channel closes and the asker is woken with ``a2a_message``
  (:func:`shared.channels.answer`). A turn that ended without an answer (failed, incomplete, or
  no text at all) closes the channel ``failed`` and still wakes the asker, with a note saying
  why, so an ask never waits out the idle sweep when the answer is already known to be missing.

Not guaranteed: a node that dies between the ledger write and :func:`answered` leaves the channel
open (the redelivery is a ledger skip); the idle sweep closes it after an hour.

.. versionadded:: 0.1 (issue 14, CO-36)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

from shared import channels, logs
from shared.bus import Bus, BusError
from shared.coordination import Coordination, CoordinationUnavailable
from shared.turns import Trigger, TurnResult

from . import messages

__all__ = ["admit", "answered", "bound", "reply_of"]

_log = logs.get("seat.asks")


class _Node(Protocol):
    """What these functions read of the node context (:class:`shared.runtime.NodeContext` is one)."""

    @property
    def coord(self) -> Coordination | None: ...


def _requests(trigger: Trigger) -> list[Trigger]:
    """The ``a2a_request`` constituents of a (possibly merged) trigger, in timestamp order."""
    return [t for t in (trigger.parts or (trigger,)) if t.type == "a2a_request"]


def _channel_id(trigger: Trigger) -> str | None:
    value = trigger.payload.get("channel_id") if trigger.payload else None
    return value if isinstance(value, str) and value else None


@contextlib.contextmanager
def bound(ctx: _Node, bus: Bus, trigger: Trigger) -> Iterator[channels.AskScope | None]:
    """Bind the scope ``a2a_ask`` needs around one turn (use as ``with asks.bound(...):``).

    Args:
        ctx: The node context (its coordination store).
        bus: The node's bus.
        trigger: The (merged) trigger the turn runs on.

    Yields:
        The bound scope, or None (nothing bound: the tool answers ``unavailable``) when the node
        has no coordination store.
    """
    scope = None if ctx.coord is None else channels.AskScope.for_trigger(ctx.coord, bus, trigger)
    with channels.bind(scope):
        yield scope


async def admit(ctx: _Node, handle: str, trigger: Trigger) -> bool:
    """Whether ``trigger`` may run on ``handle`` as far as asks go (FL-124's authorisation read).

    Args:
        ctx: The node context.
        handle: The seat the delivery came to.
        trigger: One constituent trigger (not merged).

    Returns:
        True for any trigger that is not an ``a2a_request``; for one that is, True when its channel
        is open and addressed to ``handle``, or when the store could not say (fail open, logged
        ``a2a_channel_unknown``); False otherwise (logged ``notification_skipped{reason:
        channel_closed}``; the caller acks it).
    """
    if trigger.type != "a2a_request":
        return True
    channel_id = _channel_id(trigger)
    coord = ctx.coord
    if coord is None:
        _log.warning(
            "a2a_channel_unknown", seat=handle, event_id=trigger.event_id, error="no coordination store"
        )
        return True
    reason: str | None = None
    if channel_id is None:
        reason = "the request names no channel"
    else:
        try:
            channel = await channels.get_channel(coord, channel_id)
        except CoordinationUnavailable as e:
            _log.warning("a2a_channel_unknown", seat=handle, channel_id=channel_id, error=str(e))
            return True
        except channels.ChannelRecordInvalid as e:
            reason = str(e)
        else:
            if channel is None:
                reason = "no such channel"
            elif channel.target != handle:
                reason = f"the channel is addressed to {channel.target}"
            elif channel.status != "open":
                reason = f"the channel is closed ({channel.close_reason})"
    if reason is None:
        return True
    _log.info(
        "notification_skipped",
        seat=handle,
        reason="channel_closed",
        event_id=trigger.event_id,
        channel_id=channel_id,
        detail=reason,
    )
    return False


def reply_of(result: TurnResult) -> tuple[str, bool]:
    """The reply an answering turn posts, and whether it is an answer (CO-36).

    Returns:
        ``(text, True)``: the final artifact (:attr:`TurnResult.reply`) with the turn's secrets
        masked, a ``blocked`` outcome's evidence appended; ``(note, False)``: the turn ended
        without one (failed, ``incomplete``, or no text), the note names the outcome and the
        error kind.
    """
    text = messages.reply_of(result).strip()
    if text and not result.failed and result.outcome != "incomplete":
        evidence = result.submission.evidence.strip() if result.submission is not None else ""
        if result.outcome == "blocked" and evidence:
            text += f"\n\nBlocked: {evidence}"
        return text, True
    why = f"The answering turn ended {result.outcome}"
    if result.error_kind:
        why += f" ({result.error_kind})"
    return why + " without an answer.", False


async def answered(ctx: _Node, bus: Bus, handle: str, trigger: Trigger, result: TurnResult) -> list[str]:
    """Answer every ``a2a_request`` the committed turn stood for; never raises (CO-36).

    Call it after the turn's ledger rows are written (a committed, not redelivered turn). For each
    ``a2a_request`` constituent: :func:`reply_of` is posted on its channel, which closes
    (``answered`` or ``failed``), and the asker gets ``a2a_message``
    (:func:`shared.channels.answer`). Failures are logged ``a2a_answer_failed`` and skipped: the
    turn is done whatever happens to its reply (the idle sweep closes a channel left open).

    Args:
        ctx: The node context (its coordination store).
        bus: The node's bus.
        handle: The answering seat.
        trigger: The (merged) trigger the turn ran on.
        result: The turn's result.

    Returns:
        The channel ids answered now (closed by this call), in constituent order.
    """
    requests = _requests(trigger)
    if not requests:
        return []
    coord = ctx.coord
    if coord is None:
        _log.warning("a2a_answer_failed", seat=handle, turn_id=result.turn_id, error="no coordination store")
        return []
    text, ok = reply_of(result)
    done: list[str] = []
    for request in requests:
        channel_id = _channel_id(request)
        if channel_id is None:
            _log.warning(
                "a2a_answer_failed",
                seat=handle,
                event_id=request.event_id,
                error="the request names no channel",
            )
            continue
        try:
            closed = await channels.answer(
                coord,
                bus,
                channel_id,
                reply=text,
                answered=ok,
                answer_turn_id=result.turn_id,
                outcome=result.outcome,
            )
        except (CoordinationUnavailable, channels.ChannelRecordInvalid, BusError) as e:
            _log.warning(
                "a2a_answer_failed", seat=handle, channel_id=channel_id, error=f"{type(e).__name__}: {e}"
            )
            continue
        if closed is not None:
            done.append(channel_id)
    return done
