"""The memory built-ins: ``reflect_and_persist`` and ``query_episodes`` (AG-3, AG-4), and the
:class:`MemoryAccess` seam they (and ``lookup_colleague``, AG-5) read and write through.

The tools never touch the broker or the estate themselves: the node hands the turn a
:class:`MemoryAccess` (``ToolContext.memory``; :class:`shared.memory.RoutedMemory` on a node), so
this package stays below the estate. Every refusal is a :class:`~shared.tools.ToolFailed` naming
the field and the limit, an error result the model reads, never a failed turn (AG-3).

``query_episodes`` ranks the caller's own episodes by shared words with the query, then by
recency, and says ``similarity: "unavailable"``: no embeddings provider exists yet (AG-4's
"no embeddings" case).
"""

from __future__ import annotations

import re
import time
from typing import Any, Protocol

from ._errors import ToolFailed
from ._registry import Tool, ToolAnnotations, ToolContext
from ._schema import arguments

__all__ = [
    "DIARY_KINDS",
    "EPISODE_LIMIT_MAX",
    "MAX_DIARY_CHARS",
    "SHORT_TTL_DAYS",
    "MemoryAccess",
    "memory_tools",
    "words",
]

MAX_DIARY_CHARS = 2000
"""A diary entry's length, in characters (AG-3)."""
DIARY_KINDS = ("diary_long", "diary_short")
"""The diary's kinds (AG-3)."""
SHORT_TTL_DAYS = (1, 365)
"""``ttl_days`` of a ``diary_short`` entry, inclusive (AG-3, ours)."""
EPISODE_LIMIT_MAX = 20
"""``query_episodes``'s largest ``limit`` (AG-4); the default is 5."""

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an and are as at be by for from in is it of on or the this to was with".split())


def words(text: str) -> set[str]:
    """The lower-cased words of ``text`` (letters and digits), without the commonest English ones."""
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


class MemoryAccess(Protocol):
    """A seat's memory as a turn's tools see it (AG-2): reads at the writer's floor (ES-37)."""

    async def rows(self, handle: str, tables: list[str], limit: int = 500) -> list[dict[str, Any]]:
        """``handle``'s rows of ``tables``, newest first, each with ``_table``, ``_seq``, ``_at``.

        Raises:
            ToolError: the estate could not be read (the tools turn it into an error result).
        """
        ...

    async def create(self, handle: str, table: str, key: tuple[str, ...], row: dict[str, Any]) -> str:
        """Create an immutable row; returns ``written``, ``collapsed`` or ``deferred`` (AG-2)."""
        ...

    def diary_id(self, agent_id: str, content: str) -> str:
        """The diary row's id: uuid5(agent id, content as written) (AG-1)."""
        ...


def _memory(ctx: ToolContext) -> MemoryAccess:
    memory: MemoryAccess | None = ctx.memory
    if memory is None:
        raise ToolFailed("this node keeps no seat memory (no memory writer is open)", None)
    return memory


def _agent_id(ctx: ToolContext) -> str:
    seat = ctx.org.seat(ctx.seat) if ctx.org is not None else None
    return str(seat.agent_id) if seat is not None else ctx.seat


async def _reflect(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    content = args["content"]
    kind = args.get("kind", "diary_long")
    ttl = args.get("ttl_days")
    if kind not in DIARY_KINDS:
        raise ToolFailed(f"kind {kind!r} is not a diary kind: use diary_long or diary_short", "kind")
    if not content.strip():
        raise ToolFailed("content is empty: write one declarative fact (at most 2 000 characters)", "content")
    if len(content) > MAX_DIARY_CHARS:
        raise ToolFailed(
            f"content is {len(content)} characters; a diary entry holds at most 2 000 ({MAX_DIARY_CHARS})",
            "content",
        )
    lo, hi = SHORT_TTL_DAYS
    if kind == "diary_short" and (ttl is None or not lo <= ttl <= hi):
        raise ToolFailed(f"a diary_short entry needs ttl_days between {lo} and {hi}", "ttl_days")
    if kind == "diary_long" and ttl is not None:
        raise ToolFailed(
            "a diary_long entry has no deadline: leave ttl_days out (or use diary_short)", "ttl_days"
        )
    memory = _memory(ctx)
    now = time.time()
    row_id = memory.diary_id(_agent_id(ctx), content)
    row: dict[str, Any] = {
        "id": row_id,
        "agent_handle": ctx.seat,
        "kind": kind,
        "content": content,
        "source": "tool",
        "turn_id": ctx.turn_id,
        "created_at": now,
        "ttl_until": now + ttl * 86400 if ttl is not None else None,
        "retrieval_count": 0,
        "last_retrieved_at": None,
    }
    status = await memory.create(ctx.seat, "agent_diary", (row_id,), row)
    ctx.persisted = True
    return {"id": row_id, "kind": kind, "status": status}


def _score(query: set[str], episode: dict[str, Any]) -> int:
    text = " ".join(str(episode.get(k) or "") for k in ("task_summary", "plan_summary", "work_item"))
    return len(query & words(text))


async def _query_episodes(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    limit = args.get("limit", 5)
    if not 1 <= limit <= EPISODE_LIMIT_MAX:
        raise ToolFailed(f"limit {limit} is outside 1..{EPISODE_LIMIT_MAX}", "limit")
    wanted = args.get("outcome_filter")
    rows = await _memory(ctx).rows(ctx.seat, ["episodes"])
    query = words(args["query"])
    found = [
        r for r in rows if wanted is None or r.get("review_outcome") == wanted or r.get("outcome") == wanted
    ]
    # newest first already; a stable sort by shared words keeps recency among equals
    ranked = sorted(found, key=lambda r: -_score(query, r))
    keep = ("turn_id", "work_key", "work_item", "task_summary", "plan_summary", "outcome", "review_outcome")
    out = [
        {k: r.get(k) for k in keep} | {"ended_at": r.get("ended_at"), "words_shared": _score(query, r)}
        for r in ranked[:limit]
    ]
    return {
        "episodes": out,
        "count": len(out),
        "similarity": "unavailable",
        "ranked_by": "shared words, then recency",
    }


def memory_tools() -> list[Tool]:
    """Return ``reflect_and_persist`` and ``query_episodes`` (AG-3, AG-4), in catalogue order."""
    return [
        Tool(
            "reflect_and_persist",
            "Write one declarative fact to your private diary (not an instruction), at most 2 000 "
            "characters. kind diary_long keeps it; diary_short needs ttl_days (1..365). A "
            "byte-identical entry is kept once.",
            arguments(
                {
                    "content": {"type": "string"},
                    "kind": {"type": "string", "enum": list(DIARY_KINDS)},
                    "ttl_days": {"type": "integer"},
                },
                "content",
            ),
            _reflect,
            annotations=ToolAnnotations(read_only="no", destructive="no", idempotent="yes", open_world="no"),
        ),
        Tool(
            "query_episodes",
            "Find your own past turns (episodes) like this task: by shared words, then recency. "
            "limit 1..20 (default 5); outcome_filter keeps one outcome (done, failed, delivered...).",
            arguments(
                {
                    "query": {"type": "string", "minLength": 1},
                    "limit": {"type": "integer"},
                    "outcome_filter": {"type": "string"},
                },
                "query",
            ),
            _query_episodes,
            annotations=ToolAnnotations(read_only="yes", destructive="no", idempotent="yes", open_world="no"),
        ),
    ]
