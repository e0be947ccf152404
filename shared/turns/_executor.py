"""The turn: executor and reviewer phases (CO-16, CO-30), correctives (CO-32), the reply
obligation (CO-31), guards (CO-18), identity (CO-19), the in-turn fence (FL-74), token totals
(CO-22) and the turn's span tree (CO-21).

A turn runs iterations of ``execute`` then ``review`` (at most ``turn_engine.max_iterations``, 3).
Each round of a phase:

1. between rounds, a scheduled task's ``timeout_seconds`` (its payload, CO-33) is checked: past
   it, the turn fails ``scheduled_timeout``; then the fence is asked (FL-74): False stops the turn
   as ``fenced`` before anything else runs;
2. the phase's provider chain is called with the frozen system prompt, the growing conversation
   and the phase's tool surface (``tool_choice: auto``, CO-32);
3. the round is recorded (model, tokens, model time, stop reason, text);
4. a ``max_tokens``/``refusal``/``context_exceeded``/``paused`` stop fails the turn with that
   ``error_kind``; the round's tool calls are not run;
5. a round with no tool call gets a corrective user message naming the phase's closing tool
   (``submit_work`` / ``submit_review``); at most 2 in a row, reset by any tool call; a third
   such round rescues the phase (CO-32);
6. the tool calls run one after another in order; before each write-capable call the fence is
   asked again; every result goes back in full (control characters stripped, secret values
   redacted), errors included;
7. the phase ends when its closing call succeeds, when it is rescued, or at its round cap
   (``turn_engine.max_tool_rounds``, 24, for the executor; 6 for the reviewer).

The reply obligation (CO-31, :func:`~shared.turns.reply_obligation`) is derived before any model
runs and checked three times: by ``submit_work`` itself (:mod:`shared.tools._builtins`); before
review (an unasked ``no_action`` ends the turn, decision ``skipped``; a refuted ``delivered``
starts the next executor iteration with a correction); after review (``done`` on an owed turn
where nothing reached the asker is overturned to ``self_iterate``).

The reviewer (CO-30) sees the task, the obligation, the executor's result and the work done, and
has only ``submit_review``. ``done`` ends the turn with the executor's outcome; ``failed`` fails it
(``review_failed``); ``self_iterate`` starts a fresh executor iteration carrying the prior-work
ledger (:mod:`shared.turns._review`). A rescued executor ends the turn ``incomplete`` (no review);
a rescued reviewer accepts the executor's result (ours: a reviewer that cannot decide is not a
reason to throw the work away), and so does a reviewer whose provider fails (unavailable or
refusing) after the executor delivered or wrote to the tracker — the effects stand and the
delivery would not be redelivered; with nothing written yet the failure stands and the delivery
goes back (``llm_unavailable``). Guards: a ``self_iterate`` of an artifact already sent back →
``stall``; ``self_iterate`` (or a refuted claim) in the last iteration → ``max_iter``.

Outcome: the last submitted one; ``incomplete`` when the executor was rescued or capped;
``failed`` for a guard or a failure. Failures: every provider failed retryably →
``llm_unavailable`` (with ``retry_after``); a provider refused the request → ``llm_fatal``
(``context_exceeded`` when the prompt is too long); a defect (an exception outside the error
trees) → ``unhandled_exception``; guards are logged ``turn.guard_breach{kind}`` (CO-18). A
:class:`~shared.tools.ToolError` is never a failure: the model reads it and goes on.

The concurrency gate is the caller's (``node.max_concurrent``, CO-7); so are acking and NAKing
(:attr:`TurnResult.redeliver`).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Collection
from typing import Any

from opentelemetry import trace

from shared import config, telemetry
from shared.config import OrgModel, Seat
from shared.providers import ProviderChain, ProviderSet
from shared.tools import MemoryAccess, ToolRegistry, Workspace, builtin_tools

from ._engine import BudgetGate, Fence, ToolSurface
from ._errors import SeatNotRunnable
from ._recall import RecallOpener, TurnRecall, refresh_memory_tool
from ._recorder import TurnRecorder
from ._result import TurnResult
from ._run import TurnRun
from ._trigger import Trigger

__all__ = ["BudgetGate", "Fence", "ToolSurface", "TurnEngine", "review_chain_keys"]

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_REDACTED = "[redacted]"


async def _always() -> bool:
    return True


def review_chain_keys(providers: ProviderSet, role: config.CompanyRole | None) -> tuple[str, ...]:
    """Return the provider keys a role's reviewer uses (CO-30): the per-phase key (``llm_review``,
    or ``review`` of an ``llm: {default, review}`` mapping), else the role's executor chain
    (:meth:`ProviderSet.chain_keys`: role ``llm`` → ``default`` → the first entry)."""
    selected: Any = role.llm_review if role is not None else None
    if selected is None and role is not None and isinstance(role.llm, config.LlmPhases):
        selected = role.llm.review
    if isinstance(selected, str):
        return (selected,)
    if isinstance(selected, list) and selected:
        return tuple(selected)
    return providers.chain_keys(role)


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
        max_iterations: Executor/review iterations per turn; None for
            ``turn_engine.max_iterations`` (CO-30).
        clock: Monotonic seconds, for a scheduled task's ``timeout_seconds`` (CO-33); None for
            :func:`time.monotonic` (tests pass a stepped clock).
        recall: Opens each turn's memory sections at its start (AG-8,
            :mod:`shared.turns._recall`); with one, ``refresh_memory`` joins the surface. None: no
            memory sections.
        memory: The seats' memory the memory tools use (:class:`shared.tools.MemoryAccess`,
            AG-3..AG-5); None keeps none (those tools answer an error result).

    .. versionchanged:: 0.1 ``max_iterations`` and ``clock`` (issue 14).
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
        max_iterations: int | None = None,
        clock: Callable[[], float] | None = None,
        recall: RecallOpener | None = None,
        memory: MemoryAccess | None = None,
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
        self.max_iterations = max_iterations or org.company.turn_engine.max_iterations
        self.clock = clock if clock is not None else time.monotonic
        self.recall = recall
        self.recalls: dict[str, TurnRecall] = {}  # turn id -> its recall, while it runs (AG-8)
        if recall is not None:
            self.tools = ToolRegistry([*self.tools, refresh_memory_tool(self.recalls.get)])
        self.memory = memory

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
        review_chain: ProviderChain | None = None,
    ) -> TurnResult:
        """Run one turn of ``seat`` on ``trigger`` (CO-16, CO-30).

        Args:
            seat: The agent seat's handle.
            trigger: What woke it.
            workspace: The seat's workspace for this turn (writes are authored by the seat).
            fence: Asked before every round and every write-capable call (FL-74); None for
                always held (single node).
            turn_id: The execution's id; None for a new UUID (CO-19).
            chain: The executor's provider chain; None for the seat's role chain (CO-3).
            review_chain: The reviewer's chain; None for ``chain`` when one is given, else the
                role's review chain (:func:`review_chain_keys`, CO-30).

        Returns:
            The finished record; it never raises for what happened inside the turn.

        Raises:
            SeatNotRunnable: ``seat`` is unknown or human.
        """
        seat_obj = self.seat(seat)
        if review_chain is None:
            review_chain = (
                chain
                if chain is not None
                else self.providers.chain(review_chain_keys(self.providers, seat_obj.role))
            )
        run = TurnRun(
            self,
            seat_obj,
            trigger,
            workspace,
            fence or _always,
            turn_id or str(uuid.uuid4()),
            chain if chain is not None else self.providers.chain_for(seat_obj.role),
            review_chain,
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
