"""Reading a seat's memory (AG-9): what ``GET /agents/{handle}/memory`` and ``crewlet memory show`` answer.

One ``memory.rows`` read per section through the estate router, at this node's floor: the diary
(split ``long`` / ``short``, each short entry marked ``expired`` once past ``ttl_until``), the newest
50 episodes, the counterparty profiles and the synthesized skills. A section whose read fails is
``[]`` with an entry in ``errors``; when no data node answers the first read the whole answer is the
router's refusal (503, each node's reply). ``as_of_position`` is the position the diary read saw.
An unknown handle or a human seat is :class:`NoSuchAgent` (the route's 404 ``no_such_agent``).
"""

from __future__ import annotations

import time
from typing import Any

from shared.estate import EstateError
from shared.router import NobodyAnswered, RouterError, router_of
from shared.runtime import NodeContext

__all__ = ["EPISODES_SHOWN", "NoSuchAgent", "agent_memory"]

EPISODES_SHOWN = 50
"""Episodes in the answer, newest first (AG-9)."""


class NoSuchAgent(LookupError):
    """``handle`` is no agent seat of the active company (unknown, or a human)."""


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in row.items() if not k.startswith("_")}
    out["written_at_us"] = row.get("_at")
    out["seq"] = row.get("_seq")
    return out


def _split_diary(rows: list[dict[str, Any]], now: float) -> dict[str, list[dict[str, Any]]]:
    long: list[dict[str, Any]] = []
    short: list[dict[str, Any]] = []
    for row in rows:
        shown = _shown(row)
        if row.get("kind") == "diary_short":
            ttl = row.get("ttl_until")
            shown["expired"] = isinstance(ttl, (int, float)) and ttl < now
            short.append(shown)
        else:
            long.append(shown)
    return {"long": long, "short": short}


async def agent_memory(ctx: NodeContext, handle: str) -> dict[str, Any]:
    """``{handle, agent_id, as_of_position, personal_memories {long, short}, episodes,
    counterparty_profiles, synthesized_skills, errors}`` for one agent seat (AG-9).

    Raises:
        NoSuchAgent: unknown or human handle.
        NobodyAnswered, RouterError, EstateError: no data node served the diary read.
    """
    org = ctx.org
    seat = org.seat(handle) if org is not None else None
    if seat is None or seat.kind != "agent":
        raise NoSuchAgent(handle)
    router = router_of(ctx)
    diary = await router.call("memory.rows", {"handle": handle, "tables": ["agent_diary"]})
    position = diary["meta"].get("position_token")
    errors: list[dict[str, str]] = []

    async def section(table: str, limit: int | None = None) -> list[dict[str, Any]]:
        args: dict[str, Any] = {"handle": handle, "tables": [table]}
        if limit is not None:
            args["limit"] = limit
        try:
            found = await router.call("memory.rows", args)
        except (NobodyAnswered, RouterError, EstateError) as e:
            errors.append({"section": table, "error": f"{type(e).__name__}: {e}"})
            return []
        return [_shown(r) for r in found["data"]["rows"]]

    return {
        "handle": handle,
        "agent_id": str(seat.agent_id),
        "as_of_position": position,
        "personal_memories": _split_diary(list(diary["data"]["rows"]), time.time()),
        "episodes": await section("episodes", EPISODES_SHOWN),
        "counterparty_profiles": await section("counterparty_profiles"),
        "synthesized_skills": await section("synthesized_skills"),
        "errors": errors,
    }
