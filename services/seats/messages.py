"""What ``GET /messages/{id}`` says about an API message, and the reply the engine owes it (CO-8, CO-31).

The dispatcher (:mod:`services.seats.dispatcher`) writes a message's status as its delivery moves:
``running`` at admission, ``queued`` again after an attempt that asked for a redelivery,
``dead_lettered`` after the last allowed delivery, then :func:`message_status` once the turn
commits — ``answered`` with :func:`reply_of` the turn, or ``failed`` with the outcome and its
class, never ``answered`` for a turn that delivered nothing. :func:`comment_replies` copies the
reply onto the ``work_item`` a message names, once per message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from shared import estate, logs
from shared.coordination import Coordination, CoordinationUnavailable, RevisionConflict
from shared.records import abandoned_note
from shared.router import RouterError, SeatCalls, open_router
from shared.runtime import NodeContext
from shared.turns import Trigger, TurnResult

__all__ = [
    "comment_replies",
    "fit_comment",
    "message_status",
    "now_iso",
    "owes_reply",
    "reply_of",
    "requeue_abandoned",
    "set_message",
]

_log = logs.get("seat.dispatcher")


def reply_of(result: TurnResult) -> str:
    """The reply a turn leaves for an API message or an ask (CO-8, CO-36): its final artifact
    (:attr:`TurnResult.reply <shared.turns.TurnResult.reply>`: the reviewer's, else the executor's
    last text, else the submission's summary) with the turn's resolved secret values masked
    ``[redacted]``, as on its record; "" when it has none."""
    text = result.reply
    for secret in sorted(result.redact, key=len, reverse=True):
        text = text.replace(secret, "[redacted]")
    return text


def owes_reply(trigger: Trigger) -> bool:
    """True when the engine owes the sender the turn's reply (CO-8, CO-31: ``reply_mode``
    ``engine``). An API message published before the route set ``reply_mode`` counts too."""
    return trigger.reply_mode == "engine" or (
        trigger.type == "external_notification"
        and trigger.source == "api"
        and "reply_mode" not in trigger.payload
    )


def message_status(trigger: Trigger, result: TurnResult, reply: str) -> dict[str, Any]:
    """What ``GET /messages/{id}`` says after the turn for one API message (CO-8, issue 14).

    ``failed`` (with ``outcome``, ``error_kind`` and ``error``) for a failed turn, for one that
    ended ``incomplete``, and for an engine-owed message the turn left with no reply and no
    delivering call (never ``answered`` for a turn that delivered nothing); otherwise
    ``answered`` with the reply, which clears an earlier attempt's ``error`` and ``error_kind``.

    Args:
        trigger: The message's own trigger (one part of a merged one).
        result: The turn that ran it.
        reply: :func:`reply_of` the result.

    Returns:
        The fields to write: ``status``, ``reply``, ``turn_id``, ``outcome``, ``error_kind``,
        ``error``, and ``retry_in_seconds`` cleared (it belongs to a ``queued`` attempt).
    """
    base: dict[str, Any] = {"turn_id": result.turn_id, "outcome": result.outcome, "retry_in_seconds": None}
    if result.failed:
        kind = result.error_kind or result.outcome
        return {**base, "status": "failed", "reply": None, "error_kind": kind, "error": result.error or kind}
    if result.outcome == "incomplete":
        error = result.error or "the turn ended incomplete: it stopped before it finished the work"
        return {
            **base,
            "status": "failed",
            "reply": None,
            "error_kind": result.error_kind or "incomplete",
            "error": error,
        }
    if owes_reply(trigger) and not reply.strip() and not result.delivered_any:
        error = f"the turn ended {result.outcome} with no reply to a message that is owed one"
        return {**base, "status": "failed", "reply": None, "error_kind": "no_reply", "error": error}
    return {**base, "status": "answered", "reply": reply, "error_kind": None, "error": None}


async def set_message(
    coord: Coordination | None,
    payload: Mapping[str, Any],
    fields: Mapping[str, Any],
    *,
    if_unset: Mapping[str, Any] | None = None,
) -> None:
    """Write ``fields`` (and ``if_unset`` where the record has no value) into the status of the
    API message ``payload`` names (CO-8), in the ``messages`` bucket of ``coord``; a payload
    without ``message_id`` is not one. Compare-and-set at the revision read, up to 5 rounds; a
    store that cannot answer is logged ``message_status_unknown``, never raised."""
    message_id = payload.get("message_id") if isinstance(payload, Mapping) else None
    if not message_id or coord is None:
        return
    # compare-and-set at the revision read: a status write delayed past a partition cannot land
    # over a newer one written meanwhile (e.g. by the seat's successor)
    for _ in range(5):
        try:
            entry = await coord.get("messages", str(message_id))
            record = json.loads(entry.value) if entry is not None else {"message_id": message_id}
            record.update(fields)
            for key, value in (if_unset or {}).items():
                if record.get(key) is None:
                    record[key] = value
            await coord.update(
                "messages",
                str(message_id),
                json.dumps(record).encode(),
                revision=entry.revision if entry is not None else 0,
            )
            return
        except RevisionConflict:
            continue
        except CoordinationUnavailable as e:
            _log.warning("message_status_unknown", message_id=message_id, error=str(e))
            return
    _log.warning("message_status_contended", message_id=message_id)


async def requeue_abandoned(coord: Coordination | None, abandoned: list[tuple[str, str]]) -> int:
    """Set API messages whose turn this node abandoned back to ``queued`` (CO-8).

    A node killed mid-turn leaves the message ``running`` under a turn its restart marks
    ``abandoned`` (:class:`shared.records.TurnStore`), while the delivery waits for its redelivery
    (FL-83: up to the ack wait). ``GET /messages/{id}`` said ``running`` that whole time (issue 17).
    A record is changed only while it still says ``running`` under that turn (compare-and-set: a
    successor that already answered it wins).

    Args:
        coord: The coordination store (None: nothing to do).
        abandoned: ``(turn_id, message_id)`` pairs.

    Returns:
        How many records were set back to ``queued``; a store that cannot answer is logged
        ``message_status_unknown`` and skipped, never raised.
    """
    done = 0
    for turn_id, message_id in abandoned if coord is not None else ():
        assert coord is not None
        for _ in range(5):
            try:
                entry = await coord.get("messages", message_id)
                if entry is None:
                    break
                record = json.loads(entry.value)
                if record.get("status") != "running" or record.get("turn_id") != turn_id:
                    break
                record.update(status="queued", error=abandoned_note(turn_id))
                await coord.update(
                    "messages", message_id, json.dumps(record).encode(), revision=entry.revision
                )
                done += 1
                break
            except RevisionConflict:
                continue
            except (CoordinationUnavailable, ValueError) as e:
                _log.warning("message_status_unknown", message_id=message_id, error=str(e))
                break
    return done


async def comment_replies(
    ctx: NodeContext, handle: str, epoch: int, trigger: Trigger, result: TurnResult, reply: str
) -> None:
    """Post the reply to every engine-owed API message naming a ``work_item`` as a comment on
    that item, authored by the seat (CO-8), once per message.

    The comment's op id is derived from the message id (ES-6), so a rerun of the same message
    (a crash before its ledger row) collapses into the first comment. Fenced like the turn's
    own writes (FL-74). A failure is logged ``message_reply_comment_failed`` and never fails
    the delivery: the reply is on the message either way. The comment wakes nobody (it is the
    engine's copy of an answer the API caller reads, not a seat's remark, CO-41).
    """
    if not reply.strip():
        return
    calls = SeatCalls(open_router(ctx), seat=handle, epoch=epoch)
    for part in trigger.parts or (trigger,):
        message_id = part.payload.get("message_id")
        key = part.work_item_key
        if not key or not isinstance(message_id, str) or not owes_reply(part):
            continue
        if message_status(part, result, reply)["status"] != "answered":
            continue
        at = part.at
        op_id = estate.derive_op_id(
            f"reply-{key}", message_id, at_ms=int(at.timestamp() * 1000) if at is not None else 0
        )
        try:
            await calls.comment_on_work_item(
                key, fit_comment(reply, message_id), author=f"seat:{handle}", author_kind="agent", op_id=op_id
            )
        except (estate.EstateError, RouterError) as e:
            _log.warning(
                "message_reply_comment_failed",
                seat=handle,
                message_id=message_id,
                work_item=key,
                error=f"{type(e).__name__}: {e}",
            )
            continue
        _log.info("message_reply_commented", seat=handle, message_id=message_id, work_item=key)


def now_iso() -> str:
    """Now as RFC 3339 UTC with microseconds (``2026-11-30T01:27:05.391287Z``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def fit_comment(reply: str, message_id: str) -> str:
    """``reply`` as a comment body within :data:`shared.estate.COMMENT_LIMIT` bytes (UTF-8): whole
    when it fits, else cut at a character boundary with a last line saying so and where the whole
    reply is (``GET /messages/{message_id}``; the message keeps it uncut)."""
    raw = reply.encode()
    if len(raw) <= estate.COMMENT_LIMIT:
        return reply
    note = f"\n\n[reply cut to fit a comment; the whole reply: GET /messages/{message_id}]"
    room = estate.COMMENT_LIMIT - len(note.encode())
    return raw[:room].decode("utf-8", "ignore") + note
