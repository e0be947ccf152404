"""One turn's run: the ``execute`` phase's loop, its records and spans (see
:mod:`shared.turns._executor` for the rules it follows: CO-16..CO-19, CO-21, CO-22, FL-74)."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Span, Status, StatusCode

from shared import logs, telemetry
from shared.budgets import BudgetExhausted, BudgetUnavailable
from shared.config import Seat
from shared.providers import (
    AssistantMessage,
    ChatRequest,
    Completion,
    ContextTooLong,
    LLMError,
    LLMUnavailable,
    Message,
    ProviderChain,
    RequestContext,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from shared.tools import ToolContext, Workspace

from ._prompt import Prompt, build_prompt, prefetch_knowledge
from ._result import PhaseRecord, RoundRecord, ToolExecution, TurnResult, TurnStart, WorkItemCharge
from ._tracing import chat_attributes, content_attributes, turn_end_attributes, turn_start_attributes
from ._trigger import Trigger

if TYPE_CHECKING:
    from ._executor import Fence, TurnEngine

__all__ = ["TurnRun"]

_STOP_FAILURES = frozenset({"max_tokens", "refusal", "context_exceeded", "paused"})
_log = logs.get("turns")


class TurnRun:
    """One turn's state; :meth:`execute` runs it once."""

    def __init__(
        self,
        engine: TurnEngine,
        seat: Seat,
        trigger: Trigger,
        workspace: Workspace,
        fence: Fence,
        turn_id: str,
        chain: ProviderChain,
    ) -> None:
        self.e = engine
        self.seat = seat
        self.trigger = trigger
        self.workspace = workspace
        self.fence = fence
        self.chain = chain
        self.turn_id = turn_id
        self.ctx = ToolContext(seat.handle, workspace, engine.org, turn_id)
        # the turn's own surface: built-ins, plus the seat's MCP servers' meta tools and whatever
        # activate_tool brings on during the turn (CO-34); captured once, like the company (FL-116)
        surface = engine.mcp(seat.handle) if engine.mcp is not None else None
        self.tools = surface.turn_registry(engine.tools) if surface is not None else engine.tools
        self.mcp_servers = list(surface.servers()) if surface is not None else []
        self.capped = False
        self.item: dict[str, Any] | None = None
        org = engine.org
        self.request_context = RequestContext(
            seat=seat.handle,
            managers=org.managers_of(seat.handle),
            reports=org.reports_of(seat.handle),
            trigger_type=trigger.type,
            source=trigger.source,
            reason=trigger.reason,
            text=trigger.text,
            first_line=trigger.first_line,
            work_item_key=trigger.work_item_key,
            sender=trigger.sender,
        )
        self.result: TurnResult

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

    async def execute(self, refuse: tuple[str, str] | None = None) -> TurnResult:
        """Run the turn; with ``refuse=(kind, error)`` record it failed without running it."""
        trigger, e = self.trigger, self.e
        p0, wall0 = time.perf_counter(), time.time()
        attributes = turn_start_attributes(self.seat, trigger, self.turn_id, e.epoch)
        with e.tracer.start_as_current_span(
            telemetry.SPAN_TURN,
            context=telemetry.extract(trigger.trace_headers),
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            span_context = span.get_span_context()
            start = TurnStart(
                turn_id=self.turn_id,
                work_key=trigger.work_key,
                seat=self.seat.handle,
                agent_id=str(self.seat.agent_id),
                epoch=e.epoch,
                trigger=trigger,
                started_at=wall0,
                trace_id=format(span_context.trace_id, "032x") if span_context.is_valid else "",
            )
            self.result = TurnResult(
                start=start, phase=PhaseRecord(max_rounds=e.max_tool_rounds), redact=tuple(e.secrets)
            )
            if e.metrics is not None:
                e.metrics.in_flight.inc()
            try:
                _log.info(
                    "agent_turn_started",
                    turn_id=self.turn_id,
                    work_key=start.work_key,
                    seat=self.seat.handle,
                    trigger_type=trigger.type,
                    source=trigger.source,
                )
                await self._record("turn_started", start)
                if refuse is None:
                    await self._phase()
                else:
                    self._fail(*refuse)
                    self.result.phase.failed = True
                    self.result.phase.error, self.result.phase.error_kind = refuse[1], refuse[0]
                    _log.warning("turn.guard_breach", kind=refuse[0], turn_id=self.turn_id, error=refuse[1])
                self._conclude()
            finally:
                if e.metrics is not None:
                    e.metrics.in_flight.dec()
            r = self.result
            r.ended_at, r.duration_seconds = time.time(), time.perf_counter() - p0
            span.set_attributes(turn_end_attributes(r))
            if r.failed:
                span.set_status(Status(StatusCode.ERROR, r.error or r.error_kind or r.outcome))
        if e.metrics is not None:
            e.metrics.turn(
                seat=r.seat, outcome=r.outcome, error_kind=r.error_kind, seconds=r.duration_seconds
            )
        _log.info(
            "agent_turn_completed",
            turn_id=self.turn_id,
            seat=r.seat,
            outcome=r.outcome,
            error_kind=r.error_kind,
            rounds=len(r.rounds),
            tool_calls=len(r.tool_calls),
            input_tokens=r.input_tokens,
            output_tokens=r.output_tokens,
            duration_ms=round(r.duration_seconds * 1000, 1),
        )
        await self._record("turn_finished", r)
        return r

    async def _phase(self) -> None:
        e, r = self.e, self.result
        phase = r.phase
        phase.started_at, p0 = time.time(), time.perf_counter()
        with e.tracer.start_as_current_span(
            telemetry.SPAN_PHASE.format(phase=phase.phase),
            attributes={"crewlet.phase": phase.phase, "crewlet.iteration": phase.iteration},
        ) as span:
            try:
                prompt = await self._prompt()
                phase.system_prompt, phase.system_sections = prompt.system, prompt.system_sections
                phase.user_prompt, phase.user_sections = prompt.user, prompt.user_sections
                await self._record("phase_started", r.start, phase)
                await self._loop(prompt)
            except Exception as exc:  # noqa: BLE001 - a defect fails the turn, never the caller (CO-18)
                self._fail("unhandled_exception", f"{type(exc).__name__}: {exc}")
                _log.error(
                    "turn.guard_breach", kind="unhandled_exception", turn_id=self.turn_id, exc_info=True
                )
                span.record_exception(exc)
            finally:
                phase.duration_seconds = time.perf_counter() - p0
                phase.failed = r.failed
                phase.error, phase.error_kind = r.error, r.error_kind
                span.set_attributes(
                    {
                        "crewlet.rounds": phase.rounds,
                        telemetry.GEN_AI_USAGE_INPUT_TOKENS: phase.input_tokens,
                        telemetry.GEN_AI_USAGE_OUTPUT_TOKENS: phase.output_tokens,
                    }
                )
                if phase.failed:
                    span.set_status(Status(StatusCode.ERROR, phase.error or ""))
                await self._record("phase_finished", r.start, phase)

    async def _prompt(self) -> Prompt:
        knowledge: list[dict[str, Any]] = []
        if self.trigger.work_item_key:
            try:
                self.item = await self.workspace.get_work_item(self.trigger.work_item_key)
            except Exception as exc:  # noqa: BLE001 - the wake's own fields stand in
                _log.warning("work_item_prefetch_failed", key=self.trigger.work_item_key, error=str(exc))
        if self.e.prefetch:
            query = self.trigger.text or str((self.item or {}).get("title", ""))
            knowledge = await prefetch_knowledge(self.workspace, self.trigger, query=query)
        return build_prompt(
            self.e.org,
            self.seat,
            self.trigger,
            list(self.tools),
            knowledge=knowledge,
            work_item=self.item,
            mcp_servers=self.mcp_servers,
        )

    async def _loop(self, prompt: Prompt) -> None:
        r = self.result
        messages: list[Message] = r.messages
        messages.append(UserMessage(prompt.user))
        for n in range(1, self.e.max_tool_rounds + 1):
            if not await self._fence_ok(f"before round {n}"):
                return
            specs = self.tools.specs()  # re-read: an activate_tool call adds to it (CO-34)
            completion = await self._round(
                n, ChatRequest(prompt.system, tuple(messages), specs, context=self.request_context)
            )
            if completion is None:
                return
            messages.append(AssistantMessage(completion.text, completion.tool_calls))
            if completion.text:
                r.final_text = completion.text
            if completion.stop_reason in _STOP_FAILURES:
                self._fail(completion.stop_reason, f"the model stopped with {completion.stop_reason}")
                return
            if not completion.tool_calls:
                return
            for call in completion.tool_calls:
                tool = self.tools.get(call.name)
                if tool is not None and tool.fenced and not await self._fence_ok(f"before {call.name}"):
                    return
                execution = await self._tool(n, call)
                messages.append(ToolResultMessage(call.id, call.name, execution.content, execution.is_error))
                if tool is not None and tool.ends_turn and not execution.is_error:
                    return
        self.capped = True

    async def _round(self, n: int, request: ChatRequest) -> Completion | None:
        e, r = self.e, self.result
        charge = await self._charge(n, request)
        if charge is False:
            return None
        first = self.chain.members[0].model if self.chain.members else "unknown"
        with e.tracer.start_as_current_span(
            telemetry.SPAN_CHAT.format(model=first),
            attributes={
                telemetry.GEN_AI_OPERATION_NAME: "chat",
                telemetry.GEN_AI_REQUEST_MODEL: first,
                "crewlet.round": n,
                "crewlet.seat.handle": self.seat.handle,
            },
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            wall, t0 = time.time(), time.perf_counter()
            try:
                completion = await self.chain.complete(request)
            except (LLMError, LLMUnavailable) as exc:
                await self._settle(charge, 0)
                self._provider_failure(span, exc)
                return None
            seconds = time.perf_counter() - t0
            await self._settle(charge, completion.input_tokens + completion.output_tokens)
            served = self.chain.provider(completion.provider_key)
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
        )
        r.rounds.append(record)
        phase = r.phase
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

    async def _charge(self, n: int, request: ChatRequest) -> Any:
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
            return await gate.charge(str(self.seat.agent_id), self.chain.estimate(request))
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

    def _provider_failure(self, span: Span, exc: LLMError | LLMUnavailable) -> None:
        span.set_status(Status(StatusCode.ERROR, str(exc)))
        span.set_attribute("error.type", type(exc).__name__)
        if isinstance(exc, LLMUnavailable):
            self._fail("llm_unavailable", str(exc))
            self.result.retry_after = self.chain.free_in()  # every key benched: wait it out (CO-42)
            last = exc.last_error
            _log.warning(
                "llm_unavailable",
                turn_id=self.turn_id,
                chain=list(exc.chain),
                last_error=f"{last.kind}: {last}" if last is not None else None,
            )
        else:
            self._fail("context_exceeded" if isinstance(exc, ContextTooLong) else "llm_fatal", str(exc))
            _log.warning("llm_fatal", turn_id=self.turn_id, provider_key=exc.provider_key, error=str(exc))

    async def _tool(self, n: int, call: ToolCall) -> ToolExecution:
        e, r = self.e, self.result
        tool = self.tools.get(call.name)
        seq = len(r.tool_calls) + 1
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
            },
        ) as span:
            try:
                outcome = await self.tools.execute(call, self.ctx)
            except Exception as exc:
                self._keep(n, seq, call, wall, t0, f"{type(exc).__name__}: {exc}")
                raise
            content = e.clean(outcome.content)
            if outcome.is_error:
                span.set_status(Status(StatusCode.ERROR, outcome.error or ""))
                span.set_attribute("error.type", outcome.error_code or "tool_error")
            if e.capture_content:
                span.set_attribute(telemetry.GEN_AI_TOOL_CALL_ARGUMENTS, call.arguments_json())
                span.set_attribute(telemetry.GEN_AI_TOOL_CALL_RESULT, content)
        execution = ToolExecution(
            round=n,
            seq=seq,
            call_id=call.id,
            name=call.name,
            origin=tool.origin if tool else "",
            arguments=call.arguments,
            raw_arguments=call.raw_arguments,
            result=outcome.result,
            content=content,
            is_error=outcome.is_error,
            error=outcome.error,
            error_code=outcome.error_code,
            delivers_to=tool.delivers_to if tool else None,
            delivered=outcome.delivered,
            started_at=wall,
            duration_seconds=time.perf_counter() - t0,
        )
        r.tool_calls.append(execution)
        if execution.delivered:
            r.deliveries.append(call.name)
        if e.metrics is not None:
            e.metrics.tool_call(seat=self.seat.handle, tool=call.name, ok=not execution.is_error)
        await self._record("tool_finished", r.start, execution)
        return execution

    def _keep(self, n: int, seq: int, call: ToolCall, wall: float, t0: float, error: str) -> None:
        """Record the call a defect broke, so the partial record shows where it died (CO-18)."""
        tool = self.tools.get(call.name)
        self.result.tool_calls.append(
            ToolExecution(
                round=n,
                seq=seq,
                call_id=call.id,
                name=call.name,
                origin=tool.origin if tool else "",
                arguments=call.arguments,
                raw_arguments=call.raw_arguments,
                result=None,
                content=json.dumps({"error": error, "code": "unhandled_exception"}),
                is_error=True,
                error=error,
                error_code="unhandled_exception",
                delivers_to=tool.delivers_to if tool else None,
                delivered=False,
                started_at=wall,
                duration_seconds=time.perf_counter() - t0,
            )
        )

    def _conclude(self) -> None:
        """Settle the outcome (CO-16) and the work item charge (CO-19)."""
        r, trigger = self.result, self.trigger
        r.submission = self.ctx.submission
        if not r.failed:
            if r.submission is not None:
                r.outcome = r.submission.outcome
            elif self.capped:
                r.outcome = "incomplete"
            elif r.deliveries or (trigger.reply_mode == "engine" and r.final_text.strip()):
                r.outcome = "delivered"
            else:
                r.outcome = "no_action"
        seen: dict[str, dict[str, Any]] = {}
        for touched in self.ctx.touched:
            if touched["key"]:
                seen.setdefault(touched["key"], touched)
                if touched.get("id"):
                    seen[touched["key"]]["id"] = touched["id"]
        r.touched = list(seen)
        if trigger.work_item_key:
            key = trigger.work_item_key
            item_id = (self.item or {}).get("id") or (seen.get(key) or {}).get("id")
            r.work_item = WorkItemCharge(key, item_id, key.rsplit("-", 1)[0], "trigger")
        elif len(seen) == 1:
            key, touched = next(iter(seen.items()))
            r.work_item = WorkItemCharge(key, touched.get("id"), touched["project"], "sole_write")
