"""How a turn's record leaves the engine (CO-18, CO-20).

The caller implements :class:`TurnRecorder` to persist section 10's rows and publish the
telemetry events: ``turn_started`` → ``agent_turn_started``, ``phase_started`` →
``agent_phase_started``, ``phase_finished`` → ``agent_phase_completed`` (always called, also
for a phase that died, so no phase stays open, CO-18), ``turn_finished`` →
``agent_turn_completed``. A recorder that raises does not break the turn: the engine logs
``turn_record_failed`` and goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ._result import PhaseRecord, RoundRecord, ToolExecution, TurnResult, TurnStart

__all__ = ["MemoryRecorder", "TurnRecorder"]


class TurnRecorder(Protocol):
    """Receives a turn's record as it happens (CO-20). Every method is awaited in turn order."""

    async def turn_started(self, start: TurnStart) -> None:
        """The turn began (before the prompt is built)."""
        ...

    async def phase_started(self, start: TurnStart, phase: PhaseRecord) -> None:
        """A phase began; ``phase`` holds its prompts and sections."""
        ...

    async def round_finished(self, start: TurnStart, record: RoundRecord) -> None:
        """A provider round finished (also a failed one)."""
        ...

    async def tool_finished(self, start: TurnStart, execution: ToolExecution) -> None:
        """A tool call finished (also an error result)."""
        ...

    async def phase_finished(self, start: TurnStart, phase: PhaseRecord) -> None:
        """A phase ended, finished or failed."""
        ...

    async def turn_finished(self, result: TurnResult) -> None:
        """The turn ended; ``result`` is final."""
        ...


@dataclass
class MemoryRecorder:
    """A :class:`TurnRecorder` that keeps everything in lists (tests, the single-process demo).

    Attributes:
        events: ``(event name, turn_id, payload)`` in order; names are the spec's
            (``agent_turn_started``, ``agent_phase_started``, ``round``, ``tool_execution``,
            ``agent_phase_completed``, ``agent_turn_completed``).
        results: Finished turns, in order.
    """

    events: list[tuple[str, str, Any]] = field(default_factory=list)
    results: list[TurnResult] = field(default_factory=list)

    async def turn_started(self, start: TurnStart) -> None:
        """Record ``agent_turn_started``."""
        self.events.append(("agent_turn_started", start.turn_id, start))

    async def phase_started(self, start: TurnStart, phase: PhaseRecord) -> None:
        """Record ``agent_phase_started``."""
        self.events.append(("agent_phase_started", start.turn_id, phase))

    async def round_finished(self, start: TurnStart, record: RoundRecord) -> None:
        """Record a round row."""
        self.events.append(("round", start.turn_id, record))

    async def tool_finished(self, start: TurnStart, execution: ToolExecution) -> None:
        """Record a tool execution row."""
        self.events.append(("tool_execution", start.turn_id, execution))

    async def phase_finished(self, start: TurnStart, phase: PhaseRecord) -> None:
        """Record ``agent_phase_completed``."""
        self.events.append(("agent_phase_completed", start.turn_id, phase))

    async def turn_finished(self, result: TurnResult) -> None:
        """Record ``agent_turn_completed`` and keep the result."""
        self.events.append(("agent_turn_completed", result.turn_id, result))
        self.results.append(result)

    def names(self, turn_id: str | None = None) -> list[str]:
        """Return the event names, of one turn or all."""
        return [n for n, t, _ in self.events if turn_id is None or t == turn_id]
