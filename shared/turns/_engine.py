"""What a running turn reads of its engine, and the seams the engine is given (CO-16, CO-34, CO-37).

:class:`Engine` is the part of :class:`~shared.turns.TurnEngine` a :class:`~shared.turns._run.TurnRun`
and its rounds read (the pinned org, the tool surface, the recorder, the tracer, the budgets, ...),
so the run can name it without importing the engine that builds it. :data:`Fence`,
:class:`ToolSurface` and :class:`BudgetGate` are what the engine is handed from outside.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from opentelemetry import trace

from shared import telemetry
from shared.config import OrgModel
from shared.tools import MemoryAccess, ToolRegistry

from ._recall import RecallOpener, TurnRecall
from ._recorder import TurnRecorder

__all__ = ["BudgetGate", "Engine", "Fence", "ToolSurface"]

Fence = Callable[[], Awaitable[bool]]
"""The in-turn fence (FL-73/FL-74): True while the seat is still held in the same epoch with a
fresh renew. An exception counts as False (an unknown answer is not a yes)."""


class ToolSurface(Protocol):
    """A seat's MCP tool servers as one turn sees them (CO-34; :class:`shared.mcp.McpSurface`)."""

    def servers(self) -> Sequence[str]:
        """The names of the seat's started servers (listed in the prompt)."""
        ...

    def turn_registry(self, base: ToolRegistry) -> ToolRegistry:
        """A per-turn copy of ``base`` plus ``list_mcp_server_tools`` and ``activate_tool``."""
        ...


class BudgetGate(Protocol):
    """The shared token budgets (CO-37, FL-119; :class:`shared.budgets.Budgets`)."""

    async def charge(self, agent_id: str, tokens: int) -> Any:
        """Reserve ``tokens`` on every capped window of the org and the seat, or raise
        :class:`shared.budgets.BudgetExhausted` / :class:`shared.budgets.BudgetUnavailable`."""
        ...

    async def settle(self, charge: Any, actual: int) -> None:
        """Bring a reservation to the round's real cost, in tokens."""
        ...


class Engine(Protocol):
    """The engine as one turn reads it; :class:`~shared.turns.TurnEngine` is the one implementation.

    Attributes mirror :class:`~shared.turns.TurnEngine`'s (see its arguments).
    """

    org: OrgModel
    tools: ToolRegistry
    recorder: TurnRecorder | None
    tracer: trace.Tracer
    metrics: telemetry.TurnMetrics | None
    epoch: int
    max_tool_rounds: int
    capture_content: bool
    secrets: list[str]
    prefetch: bool
    mcp: Callable[[str], ToolSurface | None] | None
    budgets: BudgetGate | None
    max_iterations: int
    clock: Callable[[], float]
    recall: RecallOpener | None
    recalls: dict[str, TurnRecall]
    memory: MemoryAccess | None

    def clean(self, text: str) -> str:
        """Strip control characters (tab and newlines stay) and redact secret values (CO-16)."""
        ...
