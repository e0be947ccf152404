"""One turn's run: ``execute`` → ``review`` iterations (CO-30), the review's rescue (CO-32), the
reply obligation's three checks (CO-31), the guards (CO-18), records and spans (CO-21).

See :mod:`shared.turns._executor` for the rules in one place; one phase's round loop, its
correctives and rescue are :mod:`shared.turns._phase`, and the provider round and the tool call
themselves are :mod:`shared.turns._rounds`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Status, StatusCode

from shared import logs, telemetry
from shared.config import Seat
from shared.providers import (
    ProviderChain,
    RequestContext,
)
from shared.tools import ToolContext, ToolRegistry, Workspace

from ._charge import work_item_charge
from ._obligation import asker_surface, refuted_claim, reply_obligation
from ._phase import Ended, Phases
from ._prompt import Prompt, _task, build_prompt, prefetch_knowledge
from ._result import PhaseRecord, Review, TurnResult, TurnStart
from ._review import (
    artifact_hash,
    iteration_prompt,
    review_prompt,
    review_tool,
)
from ._tracing import turn_end_attributes, turn_start_attributes
from ._trigger import Trigger

if TYPE_CHECKING:
    from ._engine import Engine, Fence

__all__ = ["TurnRun"]

_log = logs.get("turns")


class TurnRun(Phases):
    """One turn's state; :meth:`execute` runs it once."""

    def __init__(
        self,
        engine: Engine,
        seat: Seat,
        trigger: Trigger,
        workspace: Workspace,
        fence: Fence,
        turn_id: str,
        chain: ProviderChain,
        review_chain: ProviderChain | None = None,
    ) -> None:
        self.e = engine
        self.seat = seat
        self.trigger = trigger
        self.workspace = workspace
        self.fence = fence
        self.chain = chain
        self.review_chain = review_chain if review_chain is not None else chain
        self.turn_id = turn_id
        self.reply_mode = reply_obligation(trigger)
        surfaces, item = asker_surface(trigger)
        self.ctx = ToolContext(
            seat.handle,
            workspace,
            engine.org,
            turn_id,
            reply_mode=self.reply_mode,
            reply_surfaces=surfaces,
            reply_item=item,
            memory=engine.memory,
        )
        # the turn's own surface: built-ins, plus the seat's MCP servers' meta tools and whatever
        # activate_tool brings on during the turn (CO-34); captured once, like the company (FL-116)
        surface = engine.mcp(seat.handle) if engine.mcp is not None else None
        self.tools = surface.turn_registry(engine.tools) if surface is not None else engine.tools
        self.mcp_servers = list(surface.servers()) if surface is not None else []
        self.incomplete = False
        self.deadline: float | None = None
        self.item: dict[str, Any] | None = None
        self.prompt: Prompt | None = None
        self.texts: list[tuple[int, str]] = []  # executor text by iteration, oldest first
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
        self.phase: PhaseRecord

    async def execute(self, refuse: tuple[str, str] | None = None) -> TurnResult:
        """Run the turn; with ``refuse=(kind, error)`` record it failed without running it."""
        trigger, e = self.trigger, self.e
        p0, wall0 = time.perf_counter(), time.time()
        timeout = self._timeout_seconds()
        self.deadline = e.clock() + timeout if timeout is not None else None
        attributes = turn_start_attributes(self.seat, trigger, self.turn_id, e.epoch)
        attributes["crewlet.reply_mode"] = self.reply_mode
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
                reply_mode=self.reply_mode,
            )
            self.result = TurnResult(start=start, redact=tuple(e.secrets))
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
                    reply_mode=self.reply_mode,
                )
                await self._record("turn_started", start)
                if refuse is None:
                    await self._iterate()
                else:
                    self._fail(*refuse)
                    self.result.phases.append(
                        PhaseRecord(
                            max_rounds=e.max_tool_rounds, failed=True, error=refuse[1], error_kind=refuse[0]
                        )
                    )
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
            decision=r.decision,
            iterations=r.iterations,
            rounds=len(r.rounds),
            tool_calls=len(r.tool_calls),
            input_tokens=r.input_tokens,
            output_tokens=r.output_tokens,
            duration_ms=round(r.duration_seconds * 1000, 1),
        )
        await self._finished(r)
        return r

    async def _finished(self, r: TurnResult) -> None:
        """Record the finished turn; then its recall hears how it ended (AG-8, never raises)."""
        await self._record("turn_finished", r)
        recall = self.e.recalls.pop(self.turn_id, None)
        if recall is not None:
            await recall.settled(r, self.item)

    # -- iterations (CO-30, CO-31) -------------------------------------------------------------

    async def _iterate(self) -> None:
        """Run ``execute`` → ``review`` until the reviewer is done, a check ends the turn, or a
        guard trips (module docstring of :mod:`shared.turns._executor`)."""
        e, r = self.e, self.result
        seen: set[str] = set()
        reason = ""
        for i in range(1, e.max_iterations + 1):
            r.iterations = i
            self.ctx.submission = None
            ended = await self._phase(
                "execute", i, self._executor_prompt(i, reason), self.chain, self.tools, "submit_work"
            )
            if ended == "stopped" or r.failed:
                return
            if ended != "closed":
                self.incomplete = True  # CO-32 rescue, or the round cap (CO-16)
                return
            submission = self.ctx.submission
            assert submission is not None  # the closing call succeeded
            r.submission = submission
            # CO-31, before review: an unasked no_action ends the turn; a refuted claim loops back
            if submission.outcome == "no_action" and self.reply_mode == "none":
                r.decision = "skipped"
                _log.info(
                    "turn_review_skipped", turn_id=self.turn_id, iteration=i, reason="unasked_no_action"
                )
                return
            refuted = refuted_claim(submission, self.ctx)
            if refuted:
                _log.info("turn_claim_refuted", turn_id=self.turn_id, iteration=i, why=refuted)
                if i == e.max_iterations:
                    self._breach("max_iter", f"max_iterations {e.max_iterations} reached: {refuted}")
                    return
                reason = f"Correction: {refuted}"
                continue
            review = await self._review(i)
            if review is None:
                return
            r.review, r.decision = review, review.decision
            if review.decision == "done":
                return
            if review.decision == "failed":
                self._fail("review_failed", f"the reviewer decided failed: {review.notes}")
                _log.warning("turn_review_failed", turn_id=self.turn_id, iteration=i, notes=review.notes)
                return
            digest = artifact_hash(submission, self._text(i))
            if digest in seen:
                self._breach("stall", "two self_iterate reviews of the same artifact", iteration=i)
                return
            seen.add(digest)
            if i == e.max_iterations:
                self._breach(
                    "max_iter", f"max_iterations {e.max_iterations} reached and the reviewer asked for more"
                )
                return
            reason = "The reviewer asked for another pass:\n" + review.notes

    def _text(self, iteration: int) -> str:
        return "\n\n".join(t for i, t in self.texts if i == iteration)

    def _executor_prompt(self, iteration: int, reason: str) -> Callable[[], Awaitable[Prompt]]:
        async def build() -> Prompt:
            if self.prompt is None:
                self.prompt = await self._prompt()
            if iteration == 1:
                return self.prompt
            return iteration_prompt(
                self.prompt,
                calls=self.result.tool_calls,
                tools=self.tools,
                prior_text="\n\n".join(t for _, t in self.texts),
                reason=reason,
            )

        return build

    def _reached(self, review: Review) -> bool:
        """CO-31's after-review check: did the answer reach the asker?"""
        if self.reply_mode == "tool":
            return self.ctx.reached_asker
        if self.reply_mode == "engine":
            r = self.result
            summary = r.submission.summary if r.submission is not None else ""
            return bool((review.final_artifact or r.final_text or summary).strip())
        return True

    async def _review(self, iteration: int) -> Review | None:
        """Run the review phase of ``iteration``; the review (after the after-review check), or
        None when the turn stopped in it."""
        r = self.result
        reviews: list[Review] = []
        tools = ToolRegistry([review_tool(reviews.append)])
        decided: list[Review] = []

        async def build() -> Prompt:
            assert self.prompt is not None
            return review_prompt(
                self.e.org,
                self.seat,
                _task(self.trigger, self.item),
                tools=self.tools,
                review_surface=list(tools),
                calls=r.tool_calls,
                submission=r.submission,
                final_text=self._text(iteration),
                reply_mode=self.reply_mode,
                reply_surfaces=self.ctx.reply_surfaces,
                reply_item=self.ctx.reply_item,
            )

        def settle(ended: Ended) -> None:
            if r.failed and self._review_unreachable_after_effects():
                # the reviewer's provider failed after the executor already acted (ours): the
                # effects cannot be taken back and a redelivery would not run (CO-11), so the
                # executor's result stands instead of a turn recorded failed over work it did
                kind, error = r.error_kind, r.error
                r.outcome, r.error, r.error_kind, r.retry_after = "no_action", None, None, None
                review = Review(
                    "done",
                    notes=f"the reviewer could not be reached ({kind}: {error}); the executor's result stands",
                    rescued=True,
                )
                _log.warning(
                    "review_rescued", turn_id=self.turn_id, iteration=iteration, ended=ended, error_kind=kind
                )
                self.phase.decision, self.phase.notes = review.decision, review.notes
                decided.append(review)
                return
            if ended == "stopped" or r.failed:
                return
            if reviews:
                review = reviews[-1]
            else:  # CO-32 rescue for the reviewer (ours): the executor's result stands
                review = Review(
                    "done", notes="the reviewer gave no decision; the executor's result stands", rescued=True
                )
                _log.warning("review_rescued", turn_id=self.turn_id, iteration=iteration, ended=ended)
            if review.decision == "done" and not self._reached(review):
                where = " or ".join(self.ctx.reply_surfaces) or "the asker's surface"
                item = f" on {self.ctx.reply_item}" if self.ctx.reply_item else ""
                review = dataclasses.replace(
                    review,
                    decision="self_iterate",
                    overturned=True,
                    notes=(
                        f"Nothing reached the asker ({where}{item}) although a reply is owed "
                        f"({self.reply_mode}): answer them there. Reviewer's notes: {review.notes}"
                    ),
                )
                _log.info("review_overturned", turn_id=self.turn_id, iteration=iteration)
            self.phase.decision, self.phase.notes = review.decision, review.notes
            decided.append(review)

        await self._phase("review", iteration, build, self.review_chain, tools, "submit_review", settle)
        return decided[-1] if decided else None

    def _review_unreachable_after_effects(self) -> bool:
        """True when the review phase failed on its provider (every entry unavailable, or a
        refusal of the request) and the executor has already delivered or written to the
        tracker: the case where the executor's result stands (see :meth:`_review`)."""
        r = self.result
        return (
            self.phase.phase == "review"
            and r.error_kind in ("llm_unavailable", "llm_fatal", "context_exceeded")
            and (r.delivered_any or bool(self.ctx.touched))
        )

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
        memory: list[tuple[str, str, str]] = []
        if self.e.recall is not None:  # AG-8: opened once, here, so every iteration has the same bytes
            recall = await self.e.recall(self.seat, self.trigger, self.turn_id)
            if recall is not None:
                self.e.recalls[self.turn_id] = recall
                memory = list(recall.sections)
        return build_prompt(
            self.e.org,
            self.seat,
            self.trigger,
            list(self.tools),
            knowledge=knowledge,
            work_item=self.item,
            mcp_servers=self.mcp_servers,
            memory=memory,
        )

    def _conclude(self) -> None:
        """Settle the outcome (CO-16, CO-30..CO-32) and the work item charge (CO-19)."""
        r = self.result
        r.persisted = self.ctx.persisted
        if not r.failed:
            if self.incomplete:
                r.outcome = "incomplete"
            elif r.submission is not None:
                r.outcome = r.submission.outcome
            elif r.deliveries:
                r.outcome = "delivered"
            else:
                r.outcome = "no_action"
        r.touched, r.work_item = work_item_charge(self.trigger, self.item, self.ctx.touched)
