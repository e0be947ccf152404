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

from typing import Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from shared.runtime import NodeContext, api_error, require_grant

from ...messages import send, status_of
from ...triggers import TriggerPublisher, admit_work
from ._common import add

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


class MessageRoutes:
    """The message endpoints, publishing through the ingress trigger publisher."""

    def __init__(self, ctx: NodeContext, publisher: TriggerPublisher) -> None:
        self.ctx = ctx
        self.publisher = publisher

    async def post_message(self, handle: str, body: MessageIn) -> dict[str, Any]:
        admit_work(self.ctx)
        seat = self.ctx.org.seat(handle)
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
        return await send(
            self.ctx,
            self.publisher,
            handle,
            text=body.text,
            kind=body.kind,
            work_item=body.work_item,
            sender=body.sender,
            conversation_key=body.conversation_key,
        )

    async def get_message(self, message_id: str) -> dict[str, Any]:
        if not message_id or not set(message_id) <= _KEY_OK:
            raise api_error(400, "invalid_message_id", "message_id: not a message id", field="message_id")
        return await status_of(self.ctx, message_id)


def router(ctx: NodeContext, publisher: TriggerPublisher) -> APIRouter:
    """Build the message routes."""
    r = APIRouter(tags=["messages"])
    h = MessageRoutes(ctx, publisher)
    write = [Depends(require_grant(ctx.cfg, "work:write"))]
    read = [Depends(require_grant(ctx.cfg, "state:read"))]
    add(r, "/seats/{handle}/messages", h.post_message, methods=["POST"], status_code=202, dependencies=write)
    add(r, "/messages/{message_id}", h.get_message, methods=["GET"], dependencies=read)
    return r
