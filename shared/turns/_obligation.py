"""The reply obligation of a turn, derived from its trigger before any model runs (CO-31).

Three modes (orig):

- ``engine``: the engine hands the turn's final artifact to the asker itself: an agent-to-agent
  ask (``a2a_request``, CO-36) and our API messages (``external_notification`` from ``api``,
  CO-8);
- ``tool``: the seat must answer through a tool on the asker's surface: an assignment, a
  mention, a comment on an item the seat follows, a GitHub review request (reasons ``assigned``,
  ``mentioned``, ``commented``, ``review_requested``), or a trigger that says ``reply_mode:
  tool`` itself (a direct message);
- ``none``: nobody waits: a scheduled fire and an API task (``task_assigned``), a broadcast, a
  webhook notification, an internal event, the answer to one's own ask (``a2a_message``).

A trigger's own ``reply_mode`` only ever strengthens the derived one; a merged trigger (CO-38)
owes what its strongest constituent owes.

The asker's surface (CO-31: ``work``, ``page``, ``file``, ``github``, MCP server names): a wake
from the tracker or GitHub is answered on the work item it names (``work``; a seat with a
``github`` MCP server may answer there too); any other ``tool``-owed trigger accepts any surface.
"""

from __future__ import annotations

import re

from shared.tools import Submission, ToolContext

from ._trigger import ReplyMode, Trigger

__all__ = ["TOOL_OWED_REASONS", "asker_surface", "refuted_claim", "reply_obligation"]

_ITEM_KEY = re.compile(r"[A-Z][A-Z0-9]*-\d+")

TOOL_OWED_REASONS = frozenset({"assigned", "mentioned", "commented", "review_requested"})
"""Wake reasons that owe the waker an answer through a tool (CO-31)."""

_RANK: dict[str, int] = {"none": 0, "tool": 1, "engine": 2}


def _derived(trigger: Trigger) -> ReplyMode:
    if trigger.type == "a2a_request":
        return "engine"
    if trigger.type == "external_notification" and trigger.source == "api":
        return "engine"
    if trigger.type == "external_notification" and trigger.reason in TOOL_OWED_REASONS:
        return "tool"
    return "none"


def reply_obligation(trigger: Trigger) -> ReplyMode:
    """Return the reply a turn on ``trigger`` owes (CO-31; see the module docstring).

    Args:
        trigger: What woke the seat; a merged trigger is judged by its constituents.

    Returns:
        ``none``, ``tool`` or ``engine``: the strongest of the derived mode and the trigger's
        own ``reply_mode``, over every constituent.
    """
    modes = [m for part in (trigger.parts or (trigger,)) for m in (_derived(part), part.reply_mode)]
    modes.append(trigger.reply_mode)
    return max(modes, key=lambda mode: _RANK.get(mode, 0))


def asker_surface(trigger: Trigger) -> tuple[tuple[str, ...], str]:
    """Return where a ``tool``-owed reply to ``trigger`` must land (CO-31).

    Returns:
        ``(surfaces, item)``: the accepted surfaces (() for any) and the work item key a ``work``
        reply must touch ("" for any item). A tracker or GitHub wake naming an item → ``(("work",
        "github"), key)``; anything else → ``((), "")``.
    """
    key = trigger.work_item_key
    if key and trigger.source in ("work", "github"):
        return ("work", "github"), key
    return (), ""


def refuted_claim(submission: Submission, ctx: ToolContext) -> str:
    """CO-31's before-review check: why the executor's ``delivered`` does not hold, or "".

    On an ``engine``-owed turn the reply is the delivery, so nothing is refuted. Otherwise a
    ``delivered`` with no successful delivering call in the turn is refuted, and so is one that
    cites work item keys (``SUP-1``) no successful write of the turn touched.

    Args:
        submission: The executor's submission.
        ctx: The turn's tool context (its deliveries and touched items so far).

    Returns:
        The correction to send back to the executor, or "" when the claim holds.
    """
    if submission.outcome != "delivered" or ctx.reply_mode == "engine":
        return ""
    if not ctx.deliveries:
        return (
            "you submitted 'delivered', but no call of this turn delivered anything (no "
            "successful write to the tracker, the pages, the files or a tool server). Do the "
            "work, or submit the outcome that is true."
        )
    touched = {t["key"] for t in ctx.touched}
    unbacked = [d for d in submission.deliveries if _ITEM_KEY.fullmatch(d) and d not in touched]
    if unbacked:
        return (
            f"you cited {', '.join(unbacked)} as delivered, but no call of this turn wrote to "
            f"{'it' if len(unbacked) == 1 else 'them'}. Deliver there, or cite what you did deliver."
        )
    return ""
