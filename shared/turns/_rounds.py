"""One provider round and one tool call of a turn, with their records, spans and budget charge
(CO-16 steps 3-6, CO-21, CO-22, CO-37); the phase loop that drives them is
:mod:`shared.turns._run`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Span, Status, StatusCode

from shared import logs, telemetry
from shared.budgets import BudgetExhausted, BudgetUnavailable
from shared.config import Seat
from shared.providers import (
    ChatRequest,
    Completion,
    ContextTooLong,
    LLMError,
    LLMUnavailable,
    ProviderChain,
    ToolCall,
)
from shared.tools import ToolContext, ToolRegistry

from ._result import PhaseRecord, RoundRecord, ToolExecution, TurnResult
from ._tracing import chat_attributes, content_attributes

if TYPE_CHECKING:
    from ._engine import Engine, Fence

__all__ = ["Rounds"]

_log = logs.get("turns")


class Rounds:
    """The round and tool-call machinery of a :class:`~shared.turns._run.TurnRun`.

    The subclass sets every attribute below before a round runs; ``phase`` is the phase record
    the round counts towards.
    """

    e: Engine
    seat: Seat
    turn_id: str
    fence: Fence
    ctx: ToolContext
    result: TurnResult
    phase: PhaseRecord

    async def _record(self, method: str, *args: Any) -> None:
        if self.e.recorder is None:
            return
        try:
            await getattr(self.e.recorder, method)(*args)
        except Exception as e:  # noqa: BLE001 - a recorder must not break the turn
            _log.error(
                "turn_record_failed", turn_id=self.turn_id, step=method, error=f"{type(e).__name__}: {e}"
            )

    async def _fence_ok(self, where: str) -> bool:
        try:
            held = bool(await self.fence())
        except Exception as e:  # noqa: BLE001 - unknown is not a yes (FL-74)
            _log.warning("turn_fence_error", turn_id=self.turn_id, error=f"{type(e).__name__}: {e}")
            held = False
        if not held:
            self._fail("fenced", f"seat fence tripped {where}", outcome="fenced")
            _log.warning("turn_fenced", turn_id=self.turn_id, seat=self.seat.handle, where=where)
        return held

    def _fail(self, kind: str, error: str, *, outcome: str = "failed") -> None:
        r = self.result
        r.outcome = outcome  # type: ignore[assignment]  # "failed" | "fenced"
        r.error_kind, r.error = kind, error

    async def _round(self, n: int, chain: ProviderChain, request: ChatRequest) -> Completion | None:
        e, r, phase = self.e, self.result, self.phase
        charge = await self._charge(n, chain, request)
        if charge is False:
            return None
        first = chain.members[0].model if chain.members else "unknown"
        with e.tracer.start_as_current_span(
            telemetry.SPAN_CHAT.format(model=first),
            attributes={
                telemetry.GEN_AI_OPERATION_NAME: "chat",
                telemetry.GEN_AI_REQUEST_MODEL: first,
                "crewlet.round": n,
                "crewlet.phase": phase.phase,
                "crewlet.iteration": phase.iteration,
                "crewlet.seat.handle": self.seat.handle,
            },
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            wall, t0 = time.time(), time.perf_counter()
            try:
                completion = await chain.complete(request)
            except (LLMError, LLMUnavailable) as exc:
                await self._settle(charge, 0)
                self._provider_failure(span, chain, exc)
                return None
            seconds = time.perf_counter() - t0
            await self._settle(charge, completion.input_tokens + completion.output_tokens)
            served = chain.provider(completion.provider_key)
            span.update_name(telemetry.SPAN_CHAT.format(model=completion.model))
            span.set_attributes(chat_attributes(completion, served.model if served else completion.model))
            if e.capture_content:
                span.set_attributes(content_attributes(request, completion))
        record = RoundRecord(
            round=n,
            provider_key=completion.provider_key,
            model=completion.model,
            started_at=wall,
            duration_seconds=seconds,
            input_tokens=completion.input_tokens,
            output_tokens=completion.output_tokens,
            cache_read_tokens=completion.cache_read_tokens,
            cache_write_tokens=completion.cache_write_tokens,
            stop_reason=completion.stop_reason,
            text=completion.text,
            tool_calls=completion.tool_calls,
            phase=phase.phase,
            iteration=phase.iteration,
        )
        r.rounds.append(record)
        phase.rounds += 1
        phase.provider_key, phase.model = completion.provider_key, completion.model
        for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
            value = getattr(completion, name)
            setattr(r, name, getattr(r, name) + value)
            setattr(phase, name, getattr(phase, name) + value)
        if completion.provider_key not in r.provider_keys:
            r.provider_keys.append(completion.provider_key)
        if completion.model not in r.models:
            r.models.append(completion.model)
        if e.metrics is not None:
            e.metrics.round(
                seat=self.seat.handle,
                provider_key=completion.provider_key,
                model=completion.model,
                seconds=seconds,
                input_tokens=completion.input_tokens,
                output_tokens=completion.output_tokens,
                cache_read_tokens=completion.cache_read_tokens,
                cache_write_tokens=completion.cache_write_tokens,
            )
        await self._record("round_finished", r.start, record)
        return completion

    async def _charge(self, n: int, chain: ProviderChain, request: ChatRequest) -> Any:
        """Charge the round to the budgets before it runs (CO-37, FL-119).

        Reserves the chain's estimate of the round on every capped window of the org and the seat:
        exact for the offline provider; for HTTP providers the request's size plus the output cap,
        which errs high for ordinary text (text dense in rare tokens can cost more; the settle then
        charges the difference unchecked). Returns the charge to settle, None when no
        budgets are kept, or False when the turn ends here: refused (``budget_exhausted``, the
        refusal's figures on the record) or the store could not say (``budget_unavailable``, never
        reported as out of budget).
        """
        gate = self.e.budgets
        if gate is None:
            return None
        try:
            return await gate.charge(str(self.seat.agent_id), chain.estimate(request))
        except BudgetExhausted as exc:
            self.result.budget = exc.to_dict()
            self._fail("budget_exhausted", str(exc))
            _log.warning(
                "budget_exhausted", turn_id=self.turn_id, seat=self.seat.handle, round=n, **exc.to_dict()
            )
        except BudgetUnavailable as exc:
            self._fail("budget_unavailable", str(exc))
            _log.warning("budget_unavailable", turn_id=self.turn_id, seat=self.seat.handle, error=str(exc))
        return False

    async def _settle(self, charge: Any, actual: int) -> None:
        """Bring a reserved charge to what the round really cost (CO-22); never fails the turn."""
        if charge is None or self.e.budgets is None:
            return
        try:
            await self.e.budgets.settle(charge, actual)
        except Exception as exc:  # noqa: BLE001 - the round ran; a failed settle over-states (fail closed)
            _log.warning("budget_settle_failed", turn_id=self.turn_id, error=f"{type(exc).__name__}: {exc}")

    def _provider_failure(self, span: Span, chain: ProviderChain, exc: LLMError | LLMUnavailable) -> None:
        """Fail the turn for a provider failure. For ``llm_unavailable`` the record's
        ``retry_after`` is the longer of the chain's wait for a free key (CO-42) and the longest
        ``Retry-After`` any attempt's server sent (:attr:`LLMUnavailable.retry_after`, capped at
        ``MAX_RETRY_AFTER``; CO-12, FL-121); None when neither says."""
        span.set_status(Status(StatusCode.ERROR, str(exc)))
        span.set_attribute("error.type", type(exc).__name__)
        if isinstance(exc, LLMUnavailable):
            self._fail("llm_unavailable", str(exc))
            waits = [chain.free_in(), exc.retry_after]  # the servers' Retry-After, capped (CO-12)
            known = [float(w) for w in waits if w is not None]
            self.result.retry_after = max(known) if known else None
            last = exc.last_error
            _log.warning(
                "llm_unavailable",
                turn_id=self.turn_id,
                chain=list(exc.chain),
                last_error=f"{last.kind}: {last}" if last is not None else None,
                retry_after=self.result.retry_after,
            )
        else:
            self._fail("context_exceeded" if isinstance(exc, ContextTooLong) else "llm_fatal", str(exc))
            _log.warning("llm_fatal", turn_id=self.turn_id, provider_key=exc.provider_key, error=str(exc))

    async def _tool(self, n: int, call: ToolCall, tools: ToolRegistry) -> ToolExecution:
        e, r, phase = self.e, self.result, self.phase
        tool = tools.get(call.name)
        seq = len(r.tool_calls) + 1
        touched_before = len(self.ctx.touched)
        wall, t0 = time.time(), time.perf_counter()
        with e.tracer.start_as_current_span(
            telemetry.SPAN_EXECUTE_TOOL.format(name=call.name),
            attributes={
                telemetry.GEN_AI_OPERATION_NAME: "execute_tool",
                telemetry.GEN_AI_TOOL_NAME: call.name,
                telemetry.GEN_AI_TOOL_CALL_ID: call.id,
                "crewlet.tool.origin": tool.origin if tool else "",
                "crewlet.tool.delivers": bool(tool and tool.delivers),
                "crewlet.round": n,
                "crewlet.phase": phase.phase,
            },
        ) as span:
            done = self._done_before(call, tool)
            try:
                outcome = _AlreadyDone.of(done) if done is not None else await tools.execute(call, self.ctx)
            except Exception as exc:
                self._keep(n, seq, call, tool, wall, t0, f"{type(exc).__name__}: {exc}")
                raise
            if done is not None:
                span.set_attribute("crewlet.tool.already_done", done.seq)
                _log.info(
                    "tool_call_already_done",
                    turn_id=self.turn_id,
                    tool=call.name,
                    iteration=phase.iteration,
                    first_seq=done.seq,
                )
            content = e.clean(outcome.content)
            if outcome.is_error:
                span.set_status(Status(StatusCode.ERROR, outcome.error or ""))
                span.set_attribute("error.type", outcome.error_code or "tool_error")
            if e.capture_content:
                span.set_attribute(telemetry.GEN_AI_TOOL_CALL_ARGUMENTS, call.arguments_json())
                span.set_attribute(telemetry.GEN_AI_TOOL_CALL_RESULT, content)
        execution = self._execution(
            n,
            seq,
            call,
            tool,
            wall,
            t0,
            result=outcome.result,
            content=content,
            is_error=outcome.is_error,
            error=outcome.error,
            error_code=outcome.error_code,
            delivered=outcome.delivered,
        )
        r.tool_calls.append(execution)
        if execution.delivered:
            r.deliveries.append(call.name)
            keys = tuple(t["key"] for t in self.ctx.touched[touched_before:] if t.get("key"))
            self.ctx.record_delivery(call.name, execution.surface or "", keys)
        if e.metrics is not None:
            e.metrics.tool_call(seat=self.seat.handle, tool=call.name, ok=not execution.is_error)
        await self._record("tool_finished", r.start, execution)
        return execution

    def _done_before(self, call: ToolCall, tool: Any) -> ToolExecution | None:
        """The earlier iteration's successful call this one repeats, if any (CO-30).

        A later executor iteration carries the prior-work ledger in its prompt, but a model may
        still repeat a write word for word. A write (a fenced or delivering tool) whose name and
        arguments equal a successful write of an earlier iteration of this turn is not run again:
        the model reads the first call's result marked ``already_done`` (ours). Reads run again.
        """
        if self.phase.iteration <= 1 or tool is None or not (tool.fenced or tool.delivers):
            return None
        if call.arguments is None:
            return None
        wanted = json.dumps(call.arguments, sort_keys=True, default=str)
        for prior in self.result.tool_calls:
            if (
                prior.iteration < self.phase.iteration
                and prior.phase == "execute"
                and prior.name == call.name
                and not prior.is_error
                and prior.arguments is not None
                and json.dumps(prior.arguments, sort_keys=True, default=str) == wanted
            ):
                return prior
        return None

    def _execution(
        self, n: int, seq: int, call: ToolCall, tool: Any, wall: float, t0: float, **outcome: Any
    ) -> ToolExecution:
        """The record of call ``seq`` (round ``n``) of this phase, ended now; ``outcome`` holds
        ``result``, ``content``, ``is_error``, ``error``, ``error_code`` and ``delivered``."""
        return ToolExecution(
            round=n,
            seq=seq,
            call_id=call.id,
            name=call.name,
            origin=tool.origin if tool else "",
            arguments=call.arguments,
            raw_arguments=call.raw_arguments,
            delivers_to=tool.delivers_to if tool else None,
            started_at=wall,
            duration_seconds=time.perf_counter() - t0,
            phase=self.phase.phase,
            iteration=self.phase.iteration,
            **outcome,
        )

    def _keep(self, n: int, seq: int, call: ToolCall, tool: Any, wall: float, t0: float, error: str) -> None:
        """Record the call a defect broke, so the partial record shows where it died (CO-18)."""
        self.result.tool_calls.append(
            self._execution(
                n,
                seq,
                call,
                tool,
                wall,
                t0,
                result=None,
                content=json.dumps({"error": error, "code": "unhandled_exception"}),
                is_error=True,
                error=error,
                error_code="unhandled_exception",
                delivered=False,
            )
        )


@dataclass(frozen=True)
class _AlreadyDone:
    """The outcome handed back for a write an earlier iteration already made (see
    :meth:`Rounds._done_before`): not an error, not a new delivery, the first call's result."""

    content: str
    result: Any
    is_error: bool = False
    error: str | None = None
    error_code: str | None = None
    delivered: bool = False

    @classmethod
    def of(cls, prior: ToolExecution) -> _AlreadyDone:
        """The outcome that points the model at ``prior`` (call ``seq`` of this turn)."""
        note = (
            f"already done in an earlier pass of this turn (call {prior.seq}); not run again. "
            "Its result follows."
        )
        return cls(
            json.dumps({"already_done": True, "note": note, "result": prior.result}, default=str),
            prior.result,
        )
