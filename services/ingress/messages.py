"""API messages and tasks to a seat (CO-8, CO-31): their record in the ``messages`` slot and their trigger.

Used by ``services/ingress/api/routes/messages.py`` (its docstring says the record's statuses):
:func:`send` checks the named work item, writes the ``queued`` record and publishes the trigger;
:func:`status_of` reads a record back (a ``running`` one whose turn this node abandoned when it was
killed reads ``queued``). Refusals are raised as the HTTP errors the routes answer.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from shared import estate
from shared.coordination import CoordinationUnavailable
from shared.records import TurnStore, abandoned_note
from shared.router import RouterError, open_router
from shared.runtime import NodeContext, api_error

from .triggers import TriggerPublisher

__all__ = ["send", "status_of"]


async def _check_work_item(ctx: NodeContext, key: str) -> None:
    """The item must exist: a turn charged to a missing item would invent spend for it."""
    try:
        await open_router(ctx).get_work_item(key)
    except estate.NotFound:
        raise api_error(404, "unknown_work_item", f"work_item: no work item {key!r}") from None
    except estate.InvalidField as e:  # a key no item can have: the caller's input, not the estate
        raise api_error(400, "invalid", {"field": "work_item", "message": e.detail}) from None
    except (estate.EstateError, RouterError) as e:
        raise api_error(503, "estate_unavailable", str(e), headers={"Retry-After": "5"}) from None


async def send(
    ctx: NodeContext,
    publisher: TriggerPublisher,
    handle: str,
    *,
    text: str,
    kind: str,
    work_item: str | None,
    sender: str | None,
    conversation_key: str | None,
) -> dict[str, Any]:
    """Record a ``queued`` message to seat ``handle`` and publish it (a ``message`` is owed the
    turn's reply by the engine, a ``task`` nothing; CO-8/CO-31).

    Returns:
        ``{"message_id", "event_id", "trace_id"}``.

    Raises:
        HTTPException: 404 ``unknown_work_item`` / 400 ``invalid`` for ``work_item``; 503 when the
            estate or the message store cannot be asked.
    """
    if work_item:
        await _check_work_item(ctx, work_item)
    message_id = str(uuid.uuid4())
    record = {
        "message_id": message_id,
        "seat": handle,
        "status": "queued",
        "reply": None,
        "turn_id": None,
        "outcome": None,
        "error_kind": None,
        "error": None,
        "kind": kind,
    }
    if ctx.coord is None:
        raise api_error(503, "lease store unavailable", "the node has no coordination store yet")
    try:
        await ctx.coord.put("messages", message_id, json.dumps(record).encode())
    except CoordinationUnavailable as e:
        raise api_error(503, "message_store_unavailable", str(e), headers={"Retry-After": "5"}) from None
    payload: dict[str, Any] = {
        "text": text,
        "message_id": message_id,
        "sender": sender,
        "conversation_key": conversation_key,
        "source": "api",
        # CO-8/CO-31: a message is owed the turn's reply by the engine; a task is owed nothing
        "reply_mode": "engine" if kind == "message" else "none",
    }
    extra: dict[str, Any] = {}
    if work_item:
        payload["work_item"] = work_item
        extra["work_item"] = work_item
    published = await publisher.publish(
        handle,
        type="external_notification" if kind == "message" else "task_assigned",
        source="api",
        payload=payload,
        msg_id=f"message:{message_id}",
        extra=extra,
    )
    return {"message_id": message_id, "event_id": published.event_id, "trace_id": published.trace_id}


async def status_of(ctx: NodeContext, message_id: str) -> dict[str, Any]:
    """The record of ``message_id`` (kept 7 days).

    Raises:
        HTTPException: 404 ``unknown_message``; 503 when the message store cannot be asked.
    """
    if ctx.coord is None:
        raise api_error(503, "lease store unavailable", "the node has no coordination store yet")
    try:
        entry = await ctx.coord.get("messages", message_id)
    except CoordinationUnavailable as e:
        raise api_error(503, "message_store_unavailable", str(e), headers={"Retry-After": "5"}) from None
    if entry is None:
        raise api_error(404, "unknown_message", f"message_id: no message {message_id!r} (kept 7 days)")
    data: dict[str, Any] = json.loads(entry.value)
    turns = ctx.extras.get("turns")
    if data.get("status") == "running" and isinstance(turns, TurnStore):
        # this node was killed during the message's turn and has just restarted: the seats
        # role sets the record back to queued once it starts; until then say so here too
        if any(data.get("turn_id") == t for t, _ in turns.abandoned_at_open):
            data = {**data, "status": "queued", "error": abandoned_note(str(data["turn_id"]))}
    return data
