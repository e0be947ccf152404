"""One phase of a turn: its span and records, the round loop, correctives and rescue (CO-16, CO-32),
and the guards checked between rounds (the scheduled task's timeout CO-33, the fence FL-74).

:class:`~shared.turns._run.TurnRun` runs its ``execute`` and ``review`` phases through
:meth:`Phases._phase`; the provider round and the tool call themselves are
:mod:`shared.turns._rounds`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from opentelemetry.trace import Status, StatusCode

from shared import logs, telemetry
from shared.providers import (
    AssistantMessage,
    ChatRequest,
    Message,
    ProviderChain,
    RequestContext,
    ToolResultMessage,
    UserMessage,
)
from shared.tools import ToolRegistry

from ._prompt import Prompt
from ._result import PhaseRecord
from ._review import CORRECTIVE_LIMIT, REVIEW_MAX_ROUNDS, corrective
from ._rounds import Rounds
from ._trigger import Trigger

__all__ = ["Ended", "Phases"]

_STOP_FAILURES = frozenset({"max_tokens", "refusal", "context_exceeded", "paused"})
_log = logs.get("turns")

Ended = Literal["closed", "capped", "rescued", "stopped"]
"""How a phase's loop ended: its closing call succeeded; the round cap hit; correctives ran out;
or the turn stopped (failed, fenced, timed out)."""


class Phases(Rounds):
    """The phase machinery of a :class:`~shared.turns._run.TurnRun`.

    The subclass sets every attribute below before a phase runs.
    """

    trigger: Trigger
    deadline: float | None
    texts: list[tuple[int, str]]
    request_context: RequestContext

    def _timeout_seconds(self) -> float | None:
        """A scheduled task's ``timeout_seconds`` (CO-33), or None when the trigger has none."""
        value = self.trigger.payload.get("timeout_seconds") if self.trigger.payload else None
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return float(value)
        return None

    def _breach(self, kind: str, error: str, **facts: Any) -> None:
        """Fail the turn for a guard (CO-18): ``turn.guard_breach{kind}``."""
        self._fail(kind, error)
        _log.warning("turn.guard_breach", kind=kind, turn_id=self.turn_id, error=error, **facts)

    # -- one phase (CO-16, CO-32) --------------------------------------------------------------

    async def _phase(
        self,
        kind: Literal["execute", "review"],
        iteration: int,
        build: Callable[[], Awaitable[Prompt]],
        chain: ProviderChain,
        tools: ToolRegistry,
        closing: str,
        settle: Callable[[Ended], None] | None = None,
    ) -> Ended:
        e, r = self.e, self.result
        max_rounds = e.max_tool_rounds if kind == "execute" else REVIEW_MAX_ROUNDS
        phase = PhaseRecord(phase=kind, iteration=iteration, max_rounds=max_rounds)
        self.phase = phase
        r.phases.append(phase)
        phase.started_at, p0 = time.time(), time.perf_counter()
        ended: Ended = "stopped"
        with e.tracer.start_as_current_span(
            telemetry.SPAN_PHASE.format(phase=kind),
            attributes={"crewlet.phase": kind, "crewlet.iteration": iteration},
        ) as span:
            try:
                prompt = await build()
                phase.system_prompt, phase.system_sections = prompt.system, prompt.system_sections
                phase.user_prompt, phase.user_sections = prompt.user, prompt.user_sections
                await self._record("phase_started", r.start, phase)
                ended = await self._loop(prompt, chain, tools, closing)
                if settle is not None:
                    settle(ended)
            except Exception as exc:  # noqa: BLE001 - a defect fails the turn, never the caller (CO-18)
                ended = "stopped"
                self._fail("unhandled_exception", f"{type(exc).__name__}: {exc}")
                _log.error(
                    "turn.guard_breach", kind="unhandled_exception", turn_id=self.turn_id, exc_info=True
                )
                span.record_exception(exc)
            finally:
                phase.duration_seconds = time.perf_counter() - p0
                phase.failed = r.failed
                if r.failed:
                    phase.error, phase.error_kind = r.error, r.error_kind
                span.set_attributes(
                    {
                        "crewlet.rounds": phase.rounds,
                        "crewlet.correctives": phase.correctives,
                        telemetry.GEN_AI_USAGE_INPUT_TOKENS: phase.input_tokens,
                        telemetry.GEN_AI_USAGE_OUTPUT_TOKENS: phase.output_tokens,
                    }
                )
                if phase.decision:
                    span.set_attribute("crewlet.decision", phase.decision)
                if phase.failed:
                    span.set_status(Status(StatusCode.ERROR, phase.error or ""))
                await self._record("phase_finished", r.start, phase)
        return ended

    async def _between(self, n: int) -> bool:
        """Between rounds: the scheduled task's timeout (CO-33), then the fence (FL-74)."""
        if self.deadline is not None and self.e.clock() >= self.deadline:
            limit = self._timeout_seconds() or 0.0
            self._breach(
                "scheduled_timeout",
                f"the scheduled task ran past its timeout_seconds ({limit:g} s)",
                phase=self.phase.phase,
                iteration=self.phase.iteration,
                round=n,
            )
            return False
        where = f"before round {n}" if self.phase.phase == "execute" else f"before review round {n}"
        return await self._fence_ok(where)

    async def _loop(self, prompt: Prompt, chain: ProviderChain, tools: ToolRegistry, closing: str) -> Ended:
        r, phase = self.result, self.phase
        messages: list[Message] = []

        def add(message: Message) -> None:
            messages.append(message)
            r.messages.append(message)

        add(UserMessage(prompt.user))
        streak = 0
        for n in range(1, phase.max_rounds + 1):
            if not await self._between(n):
                return "stopped"
            specs = tools.specs()  # re-read: an activate_tool call adds to it (CO-34)
            completion = await self._round(
                n, chain, ChatRequest(prompt.system, tuple(messages), specs, context=self.request_context)
            )
            if completion is None:
                return "stopped"
            add(AssistantMessage(completion.text, completion.tool_calls))
            if completion.text and phase.phase == "execute":
                r.final_text = completion.text
                self.texts.append((phase.iteration, completion.text))
            if completion.stop_reason in _STOP_FAILURES:
                self._fail(completion.stop_reason, f"the model stopped with {completion.stop_reason}")
                return "stopped"
            if not completion.tool_calls:
                if streak >= CORRECTIVE_LIMIT:  # CO-32: rescue
                    phase.rescued = True
                    _log.warning(
                        "turn_phase_rescued",
                        turn_id=self.turn_id,
                        phase=phase.phase,
                        iteration=phase.iteration,
                        correctives=phase.correctives,
                    )
                    return "rescued"
                streak += 1
                phase.correctives += 1
                _log.info(
                    "turn_corrective",
                    turn_id=self.turn_id,
                    phase=phase.phase,
                    iteration=phase.iteration,
                    round=n,
                    tool=closing,
                    streak=streak,
                )
                add(UserMessage(corrective(closing)))
                continue
            streak = 0  # any tool call resets the count (CO-32)
            for call in completion.tool_calls:
                tool = tools.get(call.name)
                if tool is not None and tool.fenced and not await self._fence_ok(f"before {call.name}"):
                    return "stopped"
                execution = await self._tool(n, call, tools)
                add(ToolResultMessage(call.id, call.name, execution.content, execution.is_error))
                if tool is not None and tool.ends_turn and not execution.is_error:
                    return "closed"
        phase.rescued = True
        return "capped"
