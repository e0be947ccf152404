"""``a2a_ask{handle, brief}``: ask a colleague seat and get the answer as your next trigger (CO-36).

The call opens a channel (:func:`shared.channels.ask`) and wakes the target with ``a2a_request``
one delegation hop deeper; it returns at once. The target's final artifact comes back later as
the asker's next trigger, ``a2a_message`` (the asking turn does not wait for it).

Refusals are error results the model reads, each with a ``code``:

- ``unknown_seat`` (``handle``): no seat has that handle (``lookup_colleague`` finds one);
- ``self_ask`` (``handle``): a seat cannot ask itself;
- ``human_seat`` (``handle``): a person has no inbox to answer from (CO-10); write to them on a
  work item instead;
- ``depth_cap`` (``handle``): the request would arrive at ``delegation_depth`` ≥
  ``turn_engine.delegation_depth_limit`` (3, CO-11), where the dispatcher refuses it anyway; asking
  it here would spend a turn on a refusal;
- ``invalid_arguments`` (``brief``): a blank brief, or one longer than :data:`BRIEF_LIMIT`
  (32 000 characters, the size of an API message's text, CO-8);
- ``unavailable``: the turn runs without a bound :class:`shared.channels.AskScope` (no bus), or the
  store or the broker could not be asked (retry later).

The call writes company state (a channel row, a wake), so it is fenced (FL-74); it delivers to no
surface of the asker's (CO-31: an ask is not a delivery). Asking the same seat the same brief twice
in one turn (or in the turn's redelivery) answers the channel already open: one ask, one wake.

.. versionadded:: 0.1 (issue 14, CO-36)
"""

from __future__ import annotations

from typing import Any

from shared import channels
from shared.bus import BusError
from shared.coordination import CoordinationUnavailable

from ._errors import ToolFailed, WorkspaceUnavailable
from ._registry import Tool, ToolAnnotations, ToolContext

__all__ = ["AskRefused", "a2a_ask_tool"]

BRIEF_LIMIT = 32_000
"""Longest brief in characters: the size of an API message's text (CO-8, ours)."""


class AskRefused(ToolFailed):
    """``a2a_ask`` refused the ask; :attr:`code` says why (see the module docstring)."""

    def __init__(self, message: str, code: str, field: str | None = "handle") -> None:
        super().__init__(message, field)
        self.code = code


def _asker_item(scope: channels.AskScope, ctx: ToolContext) -> dict[str, Any] | None:
    """The asker's work item (CO-19): the trigger's, else the one item the turn touched so far."""
    item = scope.work_item
    if item and isinstance(item.get("key"), str) and item["key"]:
        key = str(item["key"])
        return {"key": key, "id": item.get("id"), "project": key.rsplit("-", 1)[0]}
    keys = {t["key"]: t for t in ctx.touched if t.get("key")}
    if len(keys) == 1:
        touched = next(iter(keys.values()))
        return {"key": touched["key"], "id": touched.get("id"), "project": touched["project"]}
    return None


async def _ask(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    scope = channels.current()
    if scope is None:
        raise AskRefused(
            "a2a_ask is not available in this turn: it runs without a seat inbox bus", "unavailable", None
        )
    if ctx.org is None:
        raise AskRefused("no org model is loaded on this node", "unavailable", None)
    handle = args["handle"].strip().lstrip("@")
    brief = args["brief"].strip()
    if not brief:
        raise AskRefused("brief is blank: say what you need from them", "invalid_arguments", "brief")
    if handle == ctx.seat:
        raise AskRefused(f"@{handle} is you: a seat cannot ask itself", "self_ask")
    seat = ctx.org.seat(handle)
    if seat is None:
        raise AskRefused(
            f"no seat has handle {handle!r}; use lookup_colleague to find the right one", "unknown_seat"
        )
    if seat.kind == "human":
        raise AskRefused(
            f"@{handle} is a person, not an agent seat: they have no inbox to answer an ask from; "
            "write to them on a work item instead",
            "human_seat",
        )
    limit = ctx.org.company.turn_engine.delegation_depth_limit
    depth = scope.delegation_depth + 1
    if depth >= limit:
        raise AskRefused(
            f"depth_cap: asking @{handle} would reach delegation depth {depth}, at or above the limit {limit} "
            f"(chain: {' -> '.join((*scope.delegation_chain, ctx.seat))}); answer with what you have",
            "depth_cap",
        )
    try:
        channel, created = await channels.ask(
            scope,
            requester=ctx.seat,
            target=handle,
            brief=brief,
            asker_turn_id=ctx.turn_id,
            work_item=_asker_item(scope, ctx),
        )
    except (CoordinationUnavailable, BusError) as e:
        raise WorkspaceUnavailable(f"the ask could not be sent now ({e}); try again later") from None
    out: dict[str, Any] = {
        "channel_id": channel.channel_id,
        "target": handle,
        "status": channel.status,
        "delegation_depth": channel.delegation_depth,
        "already_asked": not created,
    }
    if channel.status == "closed":
        out["reply"] = channel.reply
        out["note"] = "this ask was already answered; the reply is above"
    else:
        out["note"] = (
            f"@{handle} is asked; the answer arrives as your next trigger (a2a_message). "
            "Do not wait for it in this turn: finish what you can and submit."
        )
    return out


def a2a_ask_tool() -> Tool:
    """Return ``a2a_ask`` (CO-36): fenced, delivers to no surface, idempotent per brief."""
    return Tool(
        "a2a_ask",
        "Ask a colleague agent seat (by handle) for something you need: they get your brief in "
        "their inbox and their answer comes back to you as a later trigger, not in this turn.",
        {
            "type": "object",
            "properties": {
                "handle": {"type": "string", "minLength": 1},
                "brief": {"type": "string", "minLength": 1, "maxLength": BRIEF_LIMIT},
            },
            "required": ["handle", "brief"],
            "additionalProperties": False,
        },
        _ask,
        writes=True,
        annotations=ToolAnnotations(read_only="no", destructive="no", idempotent="yes", open_world="no"),
    )
