"""``POST /seats/{handle}/messages`` and ``GET /messages/{id}`` (CO-8).

A message is an ``external_notification{source: api, reply_mode: engine}``: the engine owes the
sender the turn's reply (CO-31), and a message naming a ``work_item`` gets the reply as a comment
there too. A task is ``task_assigned`` with no reply owed. Its status lives in the coordination
``messages`` bucket (7 days; ours), so any ingress node answers ``GET /messages/{id}`` whichever
node ran the turn. The record: ``{message_id, seat, kind, status, reply, turn_id, outcome,
error_kind, error}``, ``status`` one of:

- ``queued``: published, not yet running; or back in the inbox after an attempt that asked for a
  redelivery (its ``error``/``error_kind``/``outcome`` say why, ``retry_in_seconds`` how long);
- ``running``: a turn has it (``turn_id``);
- ``answered``: the turn delivered; ``reply`` is its final artifact (an earlier attempt's error is
  cleared);
- ``failed``: the turn failed, ended ``incomplete``, or left a message that is owed a reply
  without one; ``outcome`` and ``error_kind`` (the class) and ``error`` say which;
- ``dead_lettered``: the last allowed delivery went to the seat's dead-letter subject (FL-82);
  the last attempt's ``error`` stays.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from shared import estate
from shared.coordination import CoordinationUnavailable
from shared.records import TurnStore, abandoned_note
from shared.router import RouterError, open_router
from shared.runtime import NodeContext, api_error, require_grant

from ...triggers import TriggerPublisher, admit_work

__all__ = ["MessageIn", "router"]

_KEY_OK = set("abcdefghijklmnopqrstuvwxyz0123456789-")


class MessageIn(BaseModel):
    """The body of ``POST /seats/{handle}/messages`` (CO-8)."""

    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=32_000)
    kind: Literal["message", "task"] = "message"
    work_item: str | None = Field(default=None, pattern=r"^[A-Z][A-Z0-9]{1,9}-[1-9][0-9]*$")
    sender: str | None = Field(default=None, max_length=200)
    conversation_key: str | None = Field(default=None, max_length=200)


def router(ctx: NodeContext, publisher: TriggerPublisher) -> APIRouter:
    """Build the message routes."""
    r = APIRouter(tags=["messages"])

    @r.post(
        "/seats/{handle}/messages",
        status_code=202,
        dependencies=[Depends(require_grant(ctx.cfg, "work:write"))],
    )
    async def post_message(handle: str, body: MessageIn) -> dict[str, Any]:
        admit_work(ctx)
        seat = ctx.org.seat(handle)
        if seat is None:
            raise api_error(404, "unknown_seat", f"handle: no seat {handle!r} in the active company")
        if seat.kind == "human":
            raise api_error(
                409, "human_seat_has_no_inbox", f"handle: {handle!r} is a human seat; it has no inbox"
            )
        if not body.text.strip():
            raise api_error(
                400, "invalid_request", [{"path": "text", "type": "missing", "message": "text is blank"}]
            )
        if body.work_item:
            try:  # the item must exist: a turn charged to a missing item would invent spend for it
                await open_router(ctx).get_work_item(body.work_item)
            except estate.NotFound:
                raise api_error(
                    404, "unknown_work_item", f"work_item: no work item {body.work_item!r}"
                ) from None
            except estate.InvalidField as e:  # a key no item can have: the caller's input, not the estate
                raise api_error(400, "invalid", {"field": "work_item", "message": e.detail}) from None
            except (estate.EstateError, RouterError) as e:
                raise api_error(503, "estate_unavailable", str(e), headers={"Retry-After": "5"}) from None
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
            "kind": body.kind,
        }
        if ctx.coord is None:
            raise api_error(503, "lease store unavailable", "the node has no coordination store yet")
        try:
            await ctx.coord.put("messages", message_id, json.dumps(record).encode())
        except CoordinationUnavailable as e:
            raise api_error(503, "message_store_unavailable", str(e), headers={"Retry-After": "5"}) from None
        payload: dict[str, Any] = {
            "text": body.text,
            "message_id": message_id,
            "sender": body.sender,
            "conversation_key": body.conversation_key,
            "source": "api",
            # CO-8/CO-31: a message is owed the turn's reply by the engine; a task is owed nothing
            "reply_mode": "engine" if body.kind == "message" else "none",
        }
        extra: dict[str, Any] = {}
        if body.work_item:
            payload["work_item"] = body.work_item
            extra["work_item"] = body.work_item
        published = await publisher.publish(
            handle,
            type="external_notification" if body.kind == "message" else "task_assigned",
            source="api",
            payload=payload,
            msg_id=f"message:{message_id}",
            extra=extra,
        )
        return {"message_id": message_id, "event_id": published.event_id, "trace_id": published.trace_id}

    @r.get("/messages/{message_id}", dependencies=[Depends(require_grant(ctx.cfg, "state:read"))])
    async def get_message(message_id: str) -> dict[str, Any]:
        if not message_id or not set(message_id) <= _KEY_OK:
            raise api_error(400, "invalid_message_id", "message_id: not a message id", field="message_id")
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

    return r
