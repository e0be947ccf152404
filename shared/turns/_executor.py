"""The executor phase and its tool loop (CO-16), with guards (CO-18), identity (CO-19), the
in-turn fence (FL-74), token totals (CO-22) and the turn's span tree (CO-21).

Each round of the ``execute`` phase:

1. the fence is asked (FL-74); False stops the turn as ``fenced`` before anything else runs;
2. the seat's provider chain is called with the frozen system prompt, the growing
   conversation and the tool surface;
3. the round is recorded (model, tokens, model time, stop reason, text);
4. a ``max_tokens``/``refusal``/``context_exceeded``/``paused`` stop fails the phase with
   that ``error_kind``; the round's tool calls are not run;
5. the tool calls run one after another in order; before each write-capable call the fence is
   asked again; every result goes back in full (control characters stripped, secret values
   redacted), errors included;
6. the phase ends when ``submit_work`` succeeds, when a round asks for no tool, or at the
   round cap (``turn_engine.max_tool_rounds``, 24): then the outcome is ``incomplete``.

Outcome (CO-16): the submitted one; else ``incomplete`` at the cap; else ``delivered`` when a
delivering call succeeded or the reply mode is ``engine`` with a non-empty final text; else
``no_action``. Failures: every provider failed retryably → ``llm_unavailable``; a provider
refused the request → ``llm_fatal`` (``context_exceeded`` when the prompt is too long); a
defect (an exception outside the error trees) → ``unhandled_exception``, logged as
``turn.guard_breach{kind}`` (CO-18). A :class:`~shared.tools.ToolError` is never a failure:
the model reads it and goes on.

The concurrency gate is the caller's (``node.max_concurrent``, CO-7); so are acking and NAKing
(:attr:`TurnResult.redeliver`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, Protocol

from opentelemetry import trace

from shared import telemetry
from shared.config import OrgModel, Seat
from shared.providers import ProviderChain, ProviderSet
from shared.tools import ToolRegistry, Workspace, builtin_tools

from ._errors import SeatNotRunnable
from ._recorder import TurnRecorder
from ._result import TurnResult
from ._run import TurnRun
from ._trigger import Trigger

__all__ = ["BudgetGate", "Fence", "ToolSurface", "TurnEngine"]

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


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_REDACTED = "[redacted]"


async def _always() -> bool:
    return True


class TurnEngine:
    """Runs turns for the seats of one pinned org snapshot (CO-4: one engine per apply).

    Args:
        org: The pinned org model.
        providers: The apply's provider entries (:func:`shared.providers.build_providers`).
        tools: The tool surface; None for :func:`shared.tools.builtin_tools`.
        recorder: Receives the record as it happens; None records nothing.
        tracer: Emits the span tree; None for the global tracer provider's ``crewlet.turns``.
        metrics: Prometheus counters; None counts nothing.
        epoch: The applied company epoch, recorded on every turn.
        max_tool_rounds: The round cap; None for ``turn_engine.max_tool_rounds``.
        capture_content: Put prompts, answers and tool payloads on spans
            (``telemetry.capture_content``, CO-21); the local record keeps them regardless.
        secrets: Resolved secret values to redact from tool results (values shorter than 4
            characters are ignored).
        prefetch: Prefetch relevant knowledge into the prompt (CO-17).
        mcp: ``mcp(handle)`` returns the seat's MCP tool surface, or None for built-ins only
            (CO-34); None when the node runs no MCP servers.
        budgets: Every round is charged here before it runs (CO-37, FL-119); None keeps no budget.
    """

    def __init__(
        self,
        org: OrgModel,
        providers: ProviderSet,
        *,
        tools: ToolRegistry | None = None,
        recorder: TurnRecorder | None = None,
        tracer: trace.Tracer | None = None,
        metrics: telemetry.TurnMetrics | None = None,
        epoch: int = 0,
        max_tool_rounds: int | None = None,
        capture_content: bool = False,
        secrets: Collection[str] = (),
        prefetch: bool = True,
        mcp: Callable[[str], ToolSurface | None] | None = None,
        budgets: BudgetGate | None = None,
    ) -> None:
        self.org = org
        self.providers = providers
        self.tools = tools if tools is not None else builtin_tools()
        self.recorder = recorder
        self.tracer = tracer if tracer is not None else trace.get_tracer("crewlet.turns")
        self.metrics = metrics
        self.epoch = epoch
        self.max_tool_rounds = max_tool_rounds or org.company.turn_engine.max_tool_rounds
        self.capture_content = capture_content
        self.secrets = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)
        self.prefetch = prefetch
        self.mcp = mcp
        self.budgets = budgets

    def seat(self, handle: str) -> Seat:
        """Return the agent seat ``handle``.

        Raises:
            SeatNotRunnable: No such seat, or a human one.
        """
        seat = self.org.seat(handle)
        if seat is None:
            raise SeatNotRunnable(f"no seat {handle!r} in the pinned org")
        if seat.kind != "agent":
            raise SeatNotRunnable(f"seat {handle!r} is human; humans never run turns (CO-2)")
        return seat

    async def run(
        self,
        seat: str,
        trigger: Trigger,
        *,
        workspace: Workspace,
        fence: Fence | None = None,
        turn_id: str | None = None,
        chain: ProviderChain | None = None,
    ) -> TurnResult:
        """Run one turn of ``seat`` on ``trigger`` (CO-16).

        Args:
            seat: The agent seat's handle.
            trigger: What woke it.
            workspace: The seat's workspace for this turn (writes are authored by the seat).
            fence: Asked before every round and every write-capable call (FL-74); None for
                always held (single node).
            turn_id: The execution's id; None for a new UUID (CO-19).
            chain: The provider chain; None for the seat's role chain (CO-3).

        Returns:
            The finished record; it never raises for what happened inside the turn.

        Raises:
            SeatNotRunnable: ``seat`` is unknown or human.
        """
        seat_obj = self.seat(seat)
        run = TurnRun(
            self,
            seat_obj,
            trigger,
            workspace,
            fence or _always,
            turn_id or str(uuid.uuid4()),
            chain if chain is not None else self.providers.chain_for(seat_obj.role),
        )
        return await run.execute()

    async def refuse(
        self,
        seat: str,
        trigger: Trigger,
        *,
        kind: str,
        error: str,
        workspace: Workspace,
        turn_id: str | None = None,
    ) -> TurnResult:
        """Record a turn that a guard refused before it ran, e.g. CO-11's depth cap
        (``kind="depth_cap"``): ``turn.guard_breach{kind}`` is logged, the turn is recorded
        ``failed`` with ``error_kind=kind`` (no phase runs, no provider is called) and its
        :attr:`TurnResult.redeliver` is False (ack: a redelivery would be refused again).

        Args:
            seat: The agent seat's handle.
            trigger: The refused delivery.
            kind: The guard (``depth_cap``, ...).
            error: Why, for the record.
            workspace: The seat's workspace (unused by a refusal; kept for symmetry).
            turn_id: The execution's id; None for a new UUID.

        Raises:
            SeatNotRunnable: ``seat`` is unknown or human.
        """
        seat_obj = self.seat(seat)
        run = TurnRun(
            self,
            seat_obj,
            trigger,
            workspace,
            _always,
            turn_id or str(uuid.uuid4()),
            self.providers.chain_for(seat_obj.role),
        )
        return await run.execute(refuse=(kind, error))

    def clean(self, text: str) -> str:
        """Strip control characters (tab and newlines stay) and redact secret values (CO-16)."""
        text = _CONTROL.sub("", text)
        for secret in self.secrets:
            text = text.replace(secret, _REDACTED)
        return text
