"""Recall as the turn engine sees it (AG-8): memory sections frozen at turn start, ``refresh_memory``.

The turn engine knows nothing of where memory lives (``shared.turns`` sits below ``shared.memory``):
it is handed a :data:`RecallOpener` that, once per turn at its start, returns a :class:`TurnRecall`
carrying the turn's memory sections (``personal_memory``, ``similar_prior_work``,
``counterparties``, each ``(key, title, body)``). They are rendered into the first user message
after the task, so every executor iteration of the turn carries the same bytes (the later
iterations reuse the first prompt, CO-17, CO-30). The seats role builds the opener
(:mod:`services.seats.recall`).

``refresh_memory{context_hint}`` is on the surface whenever the engine has an opener; the handler
asks the turn's :class:`TurnRecall` (which keeps the three-hint budget and the per-turn cache) and
turns its refusal into a tool error the model reads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from shared.config import Seat
from shared.tools import Tool, ToolAnnotations, ToolContext, ToolFailed

from ._trigger import Trigger

__all__ = ["REFRESH_MEMORY", "RecallOpener", "TurnRecall", "refresh_memory_tool"]

REFRESH_MEMORY = "refresh_memory"
"""The tool's name (AG-8)."""


class TurnRecall(Protocol):
    """One turn's recall, opened once at its start (AG-8)."""

    @property
    def sections(self) -> Sequence[tuple[str, str, str]]:
        """``(key, title, body)`` per memory section, in prompt order (an empty body is left out)."""
        ...

    async def refresh(self, hint: str) -> dict[str, Any]:
        """Re-run the memory filter with ``hint``; ``{"memories": [...], "cached": bool, ...}``.

        Raises:
            ValueError: the hint budget (3 distinct per turn) is spent; the message names the 3.
        """
        ...

    async def settled(self, result: Any, work_item: dict[str, Any] | None) -> None:
        """The turn ended with ``result`` (a :class:`~shared.turns.TurnResult`); ``work_item`` is
        the trigger's item as the turn read it (None: none). Never raises."""
        ...


RecallOpener = Callable[[Seat, Trigger, str], Awaitable[TurnRecall | None]]
"""``await opener(seat, trigger, turn_id)`` → the turn's recall, or None for no memory sections."""


def refresh_memory_tool(lookup: Callable[[str], TurnRecall | None]) -> Tool:
    """The ``refresh_memory`` tool (AG-8); ``lookup(turn_id)`` finds the running turn's recall."""

    async def handler(args: dict[str, Any], ctx: ToolContext) -> Any:
        recall = lookup(ctx.turn_id)
        if recall is None:
            raise ToolFailed("memory is not available to this turn", field="context_hint")
        try:
            return await recall.refresh(str(args.get("context_hint", "")))
        except ValueError as e:
            raise ToolFailed(str(e), field="context_hint") from None

    return Tool(
        name=REFRESH_MEMORY,
        description=(
            "Look through your private diary again with a hint about what you now know (after "
            "reading the work item, for instance). At most 3 distinct hints per turn; repeating a "
            "hint is free."
        ),
        parameters={
            "type": "object",
            "properties": {
                "context_hint": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 500,
                    "description": "What to look for: names, keys, topics.",
                }
            },
            "required": ["context_hint"],
            "additionalProperties": False,
        },
        handler=handler,
        annotations=ToolAnnotations(read_only="yes", destructive="no", idempotent="yes", open_world="no"),
    )
