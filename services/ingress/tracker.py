"""The tracker's side effects of an operator's write (CO-10, CO-41): who is woken, and how.

Used by the tracker routes (``services/ingress/api/routes/work.py``) after a write landed:
:func:`wake_assignee` wakes the agent seat an item was just assigned to, :func:`wake_commented`
the assignee, watchers and ``@``-mentioned agent seats of a comment. A wake that cannot be
published is logged, never the write's failure.
"""

from __future__ import annotations

from typing import Any

from shared import estate, logs, tools
from shared.bus import BusUnavailable, wake_envelope
from shared.router import RouterError, router_of
from shared.runtime import NodeContext

__all__ = ["wake_assignee", "wake_commented"]

_log = logs.get("ingress.work")


async def wake_assignee(ctx: NodeContext, res: dict[str, Any], before: str | None, writer: str) -> None:
    """Wake the new assignee when an operator assigns an item to an agent seat (CO-10).

    Args:
        ctx: The node's context (its org and its bus, ``ctx.extras["bus"]``).
        res: The write's answer (``{"object": item, "op_id", ...}``).
        before: The assignee before the write (None for a new item).
        writer: Who wrote (``operator:<token id>``).
    """
    item = res.get("object") if isinstance(res.get("object"), dict) else None
    if item is None or ctx.org is None:
        return
    assignee, key = item.get("assignee"), item.get("key")
    seat = ctx.org.seat(assignee) if isinstance(assignee, str) else None
    bus = ctx.extras.get("bus")
    if seat is None or seat.kind != "agent" or assignee == before or not isinstance(key, str) or bus is None:
        return
    try:
        await bus.publish_to_seat(
            assignee, wake_envelope(key, writer), msg_id=f"wake:{key}:{assignee}:{res.get('op_id', '')}"
        )
        _log.info("tracker_wake_published", seat=assignee, work_item=key, writer=writer)
    except BusUnavailable as e:
        _log.warning("tracker_wake_failed", seat=assignee, work_item=key, error=str(e))


async def wake_commented(ctx: NodeContext, key: str, res: dict[str, Any], author: str) -> None:
    """Wake the agent seats a posted comment concerns: the assignee, the watchers, the ``@``-mentioned
    (CO-41); the operator is no seat.

    Args:
        ctx: The node's context.
        key: The work item's key.
        res: The comment write's answer (``{"object": comment, ...}``).
        author: Who commented (``operator:<token id>``).
    """
    posted, bus = res.get("object"), ctx.extras.get("bus")
    if not isinstance(posted, dict) or "body" not in posted or bus is None or ctx.org is None:
        return
    try:
        item = (await router_of(ctx).get_work_item(key, read_level="linearizable"))["data"]
    except (estate.EstateError, RouterError) as e:
        _log.warning("comment_wake_failed", work_item=key, error=str(e))
        return
    agents = {s.handle for s in ctx.org.seats}
    await tools.publish_comment_wakes(bus, ctx.coord, item, posted, author=author, agent_seats=agents)
