"""Recall (AG-8): the memory a turn starts with, computed once and frozen, and ``refresh_memory``.

:class:`SeatRecall` is the turn engine's recall opener (``TurnEngine(recall=...)``). At a turn's
start it reads the seat's diary, episodes and counterparty profiles once (:class:`SeatMemory`: the
scratch cache on a satellite, the router elsewhere) and renders three sections:

- ``personal_memory``: the live diary's candidate pool (recency top-50 ∪ word-match top-50,
  :mod:`~services.seats.recall_pick`), filtered by the seat's auxiliary model when its role names
  one (``llm: {auxiliary: ...}``), digest ≤ 4 000 characters. The rows shown get
  ``retrieval_count += 1`` and ``last_retrieved_at`` (compare-and-set through the node's memory writer).
- ``similar_prior_work``: the top 3 episodes by shared words with the trigger, then recency.
- ``counterparties``: one profile per trigger sender, ≤ 1 000 characters each.

A thin trigger (a tracker wake, a short webhook) skips the word match, the filter call and the
episodes: ``personal_memory`` holds the most recent entries and a hint to call ``refresh_memory``
after reading. A failing block renders nothing. ``refresh_memory{context_hint}`` re-runs the pool
and the filter with the hint: 3 distinct hints per turn (case/space-insensitive), a repeat served
free from the turn's cache, a 4th refused naming the 3 spent; a failed call still spends its slot.

One ``prefetch_summary`` event per turn (logged and recorded as an event): per block ``hit``,
``bytes``, ``selection_count``, plus ``trigger_requires_recon`` and ``recall: recency+word_match``
with ``embeddings: false`` (no embeddings provider exists yet), ``filter_calls``, ``errors`` and
``elapsed_ms`` (what recall added to the turn's start).

After the turn (:meth:`TurnMemory.settled`) a turn every round of which the offline provider answered
writes its memory by rule (:mod:`~services.seats.offline_memory`), so ``make run`` shows recall.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from typing import Any

from shared import config, logs
from shared.config import Seat
from shared.providers import ChatRequest, ProviderSet, RequestContext, UserMessage
from shared.runtime import NodeContext
from shared.turns import Trigger, TurnResult

from . import offline_memory
from .memory import SeatMemory
from .recall_pick import (
    candidates,
    counterparty_text,
    digest,
    episode_text,
    is_thin,
    live_diary,
    normal_hint,
    senders,
    similar_episodes,
)

__all__ = ["FILTER_MARK", "HINTS_PER_TURN", "SeatRecall", "TurnMemory"]

HINTS_PER_TURN = 3
"""Distinct ``refresh_memory`` hints per turn (AG-8)."""
FILTER_MARK = "## Memory filter"
"""The first line of a filter request's system prompt (tests' scripted models answer it by it)."""
_FILTER_SYSTEM = (
    FILTER_MARK + "\n\nYou pick which of a colleague's private diary entries help with the task "
    "below. Answer with the numbers of the helpful entries, comma-separated (e.g. `2, 5`), or "
    "`none`. Nothing else."
)
_TABLES = ["agent_diary", "episodes", "counterparty_profiles"]
_THIN_HINT = (
    "This turn was woken without the details (a tracker wake or a short notification): read the "
    "item first, then call `refresh_memory` with what you learnt to look through your diary again."
)
_log = logs.get("seat.recall")


def _aux_keys(seat: Seat) -> tuple[str, ...]:
    llm = seat.role.llm
    selected = llm.auxiliary if isinstance(llm, config.LlmPhases) else None
    if isinstance(selected, str):
        return (selected,)
    return tuple(selected or ())


class TurnMemory:
    """One turn's recall: its frozen sections, its hint budget, its summary (AG-8)."""

    def __init__(self, owner: SeatRecall, seat: Seat, trigger: Trigger, turn_id: str) -> None:
        self.owner = owner
        self.seat = seat
        self.trigger = trigger
        self.turn_id = turn_id
        self.thin = is_thin(trigger)
        self._sections: list[tuple[str, str, str]] = []
        self.blocks: dict[str, dict[str, Any]] = {}
        self.errors: list[str] = []
        self.filter_calls = 0
        self.diary: list[dict[str, Any]] = []
        self.spent: list[str] = []
        self.cache: dict[str, dict[str, Any]] = {}
        self.started = time.perf_counter()

    @property
    def sections(self) -> list[tuple[str, str, str]]:
        """The turn's memory sections ``(key, title, body)``, frozen once :meth:`open` ran."""
        return list(self._sections)

    # -- at turn start ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Read the seat's memory once and render the sections (a failing block renders nothing)."""
        handle = self.seat.handle
        try:
            rows = await self.owner.memory.rows(handle, _TABLES)
        except Exception as e:  # noqa: BLE001 - a failing read renders no memory; the turn goes on
            self.errors.append(f"memory read: {type(e).__name__}: {e}")
            rows = []
        by: dict[str, list[dict[str, Any]]] = {t: [] for t in _TABLES}
        for row in rows:
            by.setdefault(str(row.get("_table")), []).append(row)
        self.diary = live_diary(by["agent_diary"])
        personal = await self._block("personal_memory", self._personal)
        self._sections.append(("personal_memory", "Personal memory", personal))
        if not self.thin:
            episodes = similar_episodes(by["episodes"], handle, self.trigger.text)
            body = episode_text(episodes)
            self._note("similar_prior_work", body, len(episodes))
            self._sections.append(("similar_prior_work", "Similar prior work", body))
        text, count = counterparty_text(
            [p for p in by["counterparty_profiles"] if p.get("observer_handle", handle) == handle],
            senders(self.trigger),
        )
        self._note("counterparties", text, count)
        self._sections.append(("counterparties", "Counterparties", text))
        self._summary()

    async def _block(self, name: str, build: Callable[[], Any]) -> str:
        try:
            body, count = await build()
        except Exception as e:  # noqa: BLE001 - AG-8: a failing block renders nothing
            self.errors.append(f"{name}: {type(e).__name__}: {e}")
            body, count = "", 0
        self._note(name, body, count)
        return str(body)

    def _note(self, name: str, body: str, count: int) -> None:
        chunk = f"## {name}\n\n{body.strip()}\n\n" if body.strip() else ""
        self.blocks[name] = {"hit": bool(count), "bytes": len(chunk.encode()), "selection_count": count}

    async def _personal(self) -> tuple[str, int]:
        if not self.diary:
            return "", 0
        if self.thin:  # recency only, no filter call; the hint says how to look again
            text, shown = digest(self.diary)
            self.owner.stamp_later(self.seat.handle, shown)
            return f"{text}\n\n{_THIN_HINT}", len(shown)
        chosen = await self._select(self.trigger.text)
        text, shown = digest(chosen)
        self.owner.stamp_later(self.seat.handle, shown)
        return text, len(shown)

    async def _select(self, query: str) -> list[dict[str, Any]]:
        pool = candidates(self.diary, query)
        keys = _aux_keys(self.seat)
        if not keys or not pool:
            return pool
        self.filter_calls += 1
        return await self.owner.filter(self.seat, keys, query, pool)

    def _summary(self) -> None:
        self.owner.summary(
            {
                "turn_id": self.turn_id,
                "seat": self.seat.handle,
                "blocks": self.blocks,
                "trigger_requires_recon": self.thin,
                "recall": "recency+word_match",
                "embeddings": False,
                "filter_calls": self.filter_calls,
                "errors": self.errors,
                "elapsed_ms": round((time.perf_counter() - self.started) * 1000, 1),
            }
        )

    # -- during the turn -------------------------------------------------------------------------

    async def refresh(self, hint: str) -> dict[str, Any]:
        """``refresh_memory``: the filter again with ``hint`` (AG-8's budget and cache).

        Raises:
            ValueError: a 4th distinct hint; names the 3 spent.
        """
        key = normal_hint(hint)
        if not key:
            raise ValueError("context_hint is empty: say what to look for")
        if key in self.cache:
            return {**self.cache[key], "cached": True}
        if len(self.spent) >= HINTS_PER_TURN:
            spent = "; ".join(f"'{h}'" for h in self.spent)
            raise ValueError(
                f"context_hint: at most {HINTS_PER_TURN} distinct hints per turn, spent: {spent} "
                "(repeat one of them to see its answer again)"
            )
        self.spent.append(key)  # a failed call still spends its slot
        chosen = await self._select(f"{self.trigger.text}\n{hint}")
        text, shown = digest(chosen)
        self.owner.stamp_later(self.seat.handle, shown)
        answer = {
            "hint": key,
            "memories": [str(r.get("content", "")) for r in shown],
            "hints_left": HINTS_PER_TURN - len(self.spent),
        }
        self.cache[key] = answer
        return {**answer, "cached": False}

    async def settled(self, result: Any, work_item: dict[str, Any] | None = None) -> None:
        """After the turn: the offline provider's memory rule (never raises)."""
        try:
            if isinstance(result, TurnResult) and offline_memory.answered_offline(result):
                writer = self.owner.memory.writer
                if writer is not None:
                    await offline_memory.remember(writer, self.seat, self.trigger, result, work_item)
        except Exception as e:  # noqa: BLE001 - memory never fails a turn (AG-2)
            _log.warning("offline_memory_failed", seat=self.seat.handle, error=f"{type(e).__name__}: {e}")


class SeatRecall:
    """The seats role's recall opener (AG-8): ``await recall(seat, trigger, turn_id)``.

    Args:
        ctx: The node (``extras["emit_event"]`` records ``prefetch_summary``).
        memory: Where the seat's memory is read (:class:`SeatMemory`).
        providers: Returns the current apply's provider set (the auxiliary model's chain).
    """

    def __init__(
        self, ctx: NodeContext, memory: SeatMemory, providers: Callable[[], ProviderSet | None]
    ) -> None:
        self.ctx = ctx
        self.memory = memory
        self.providers = providers
        self._stamping: set[asyncio.Task[None]] = set()

    async def __call__(self, seat: Seat, trigger: Trigger, turn_id: str) -> TurnMemory:
        """Open one turn's recall (see :class:`TurnMemory`)."""
        turn = TurnMemory(self, seat, trigger, turn_id)
        await turn.open()
        return turn

    async def filter(
        self, seat: Seat, keys: tuple[str, ...], query: str, pool: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Ask the auxiliary model which of ``pool`` help; the pool unfiltered when it cannot say.

        Raises:
            LLMUnavailable, FatalLLMError: the model could not be asked (the block renders nothing).
        """
        provs = self.providers()
        if provs is None:
            return pool
        listing = "\n".join(
            f"{i}. {' '.join(str(r.get('content', '')).split())}" for i, r in enumerate(pool, 1)
        )
        request = ChatRequest(
            system=_FILTER_SYSTEM,
            messages=(UserMessage(f"Task:\n{query[:2000]}\n\nDiary entries:\n{listing}"),),
            context=RequestContext(seat=seat.handle, trigger_type="memory_filter"),
            max_output_tokens=200,
        )
        answer = await provs.chain(keys).complete(request)
        text = answer.text.strip().lower()
        if text.startswith("none"):
            return []
        picks = [int(n) for n in re.findall(r"\d+", text)]
        chosen = [pool[n - 1] for n in dict.fromkeys(picks) if 1 <= n <= len(pool)]
        return chosen if picks else pool

    def stamp_later(self, handle: str, rows: list[dict[str, Any]]) -> None:
        """Stamp the rows a prompt shows without holding up the turn's start (:meth:`stamp` in a
        task): the stamps feed retention and the next turns' ranking, not this prompt. Measured
        (bench 5d): awaited, 50 compare-and-set stamps were about 40 % of a turn's engine cost."""
        if not rows:
            return
        task = asyncio.create_task(self.stamp(handle, rows), name=f"memory-stamp-{handle}")
        self._stamping.add(task)
        task.add_done_callback(self._stamping.discard)

    async def stamp(self, handle: str, rows: list[dict[str, Any]]) -> None:
        """``retrieval_count += 1`` and ``last_retrieved_at`` on each selected diary row (AG-8)."""
        writer = self.memory.writer
        if writer is None or not rows:
            return
        now = time.time()

        def bump(current: dict[str, Any] | None) -> dict[str, Any] | None:
            if current is None:
                return None
            count = int(current.get("retrieval_count") or 0) + 1
            return {**current, "retrieval_count": count, "last_retrieved_at": now}

        results = await asyncio.gather(
            *(writer.update(handle, "agent_diary", (str(r.get("id")),), bump) for r in rows if r.get("id")),
            return_exceptions=True,
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            _log.warning(
                "memory_retrieval_stamp_failed", seat=handle, failed=len(failed), error=str(failed[0])
            )

    def summary(self, data: dict[str, Any]) -> None:
        """Log and record the turn's one ``prefetch_summary`` event (AG-8)."""
        _log.info("prefetch_summary", **data)
        emit = self.ctx.extras.get("emit_event")
        if callable(emit):
            emit(
                {
                    "event_time": int(time.time() * 1_000_000),
                    "event_id": f"prefetch_summary.{data['turn_id']}",
                    "event_type": "prefetch_summary",
                    "source": self.ctx.node_id,
                    "category": "turns",
                    "agent_id": data["seat"],
                    "data": data,
                    "parties": {data["seat"]: "seat"},
                }
            )
