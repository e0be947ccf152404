"""What a turn records (company spec section 10; CO-16, CO-18, CO-19, CO-22, CO-30..CO-32).

Every number says its unit: times are Unix seconds (``started_at``) and seconds
(``duration_seconds``); tokens are tokens. :meth:`TurnResult.to_dict` gives the JSON shape a
recorder stores and ``GET /turns/{id}`` serves.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from shared.providers import Message, ToolCall
from shared.providers._types import plain  # asdict at a fraction of its cost (issue 16)
from shared.tools import Submission

from ._charge import WorkItemCharge
from ._trigger import ReplyMode, Trigger

__all__ = [
    "REDELIVER_ERROR_KINDS",
    "Decision",
    "ErrorKind",
    "Outcome",
    "Phase",
    "PhaseRecord",
    "Review",
    "RoundRecord",
    "Section",
    "ToolExecution",
    "TurnResult",
    "TurnStart",
]

Outcome = Literal["delivered", "no_action", "blocked", "incomplete", "failed", "fenced"]
"""A turn's outcome: section 10's five, plus ``fenced`` (FL-74: stopped by the seat fence; the
delivery is deferred, not acked)."""

ErrorKind = Literal[
    "llm_unavailable",
    "llm_fatal",
    "budget_exhausted",
    "budget_unavailable",
    "context_exceeded",
    "max_tokens",
    "refusal",
    "paused",
    "unhandled_exception",
    "depth_cap",
    "fenced",
    "stall",
    "max_iter",
    "scheduled_timeout",
    "review_failed",
]
"""Why a turn failed (CO-16, CO-18). P1 guards (CO-18, CO-30, CO-33): ``stall`` (two
``self_iterate`` reviews of the same artifact), ``max_iter`` (``turn_engine.max_iterations``
reached with the reviewer still asking for more), ``scheduled_timeout`` (a scheduled task ran past
its ``timeout_seconds``); ``review_failed`` (ours): the reviewer decided ``failed``."""

Phase = Literal["execute", "review"]
"""A phase of a turn (CO-30): the executor, then the reviewer."""

Decision = Literal["done", "self_iterate", "failed", "skipped"]
"""How a turn's review ended (CO-30, CO-31): the reviewer's ``done | self_iterate | failed``, or
``skipped`` when an unasked ``no_action`` ended the turn before any review."""

REDELIVER_ERROR_KINDS: frozenset[str] = frozenset(
    {"llm_unavailable", "fenced", "budget_exhausted", "budget_unavailable"}
)
"""Failures after which the delivery is NAKed when no delivering call has succeeded (CO-11,
FL-74). Every other failure is acked: a redelivery would meet the same refusal or defect."""


@dataclass(frozen=True)
class Section:
    """One named part of a prompt (CO-17): its key, its title and its UTF-8 length in bytes."""

    key: str
    title: str
    bytes: int


@dataclass(frozen=True)
class RoundRecord:
    """One provider round (section 10 ``round``).

    Attributes:
        round: 1-based within the phase.
        provider_key: The entry that served; "" when every entry failed.
        model: The model that served; "" when none did.
        started_at: Unix seconds.
        duration_seconds: Model time only, in seconds.
        input_tokens: Full prompt count (cache included), in tokens.
        output_tokens: In tokens.
        cache_read_tokens: Part of ``input_tokens``.
        cache_write_tokens: Part of ``input_tokens``.
        stop_reason: The normalised stop reason, or "" when the call failed.
        text: The assistant text.
        tool_calls: The calls asked for.
        phase: ``execute`` or ``review`` (CO-30).
        iteration: The executor/review iteration, from 1 (CO-30).

    A provider call that failed is not a round: it leaves no row (its span records the error).

    .. versionchanged:: 0.1 ``phase`` and ``iteration`` (issue 14, CO-30).
    """

    round: int
    provider_key: str
    model: str
    started_at: float
    duration_seconds: float
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    stop_reason: str = ""
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    phase: Phase = "execute"
    iteration: int = 1


@dataclass(frozen=True)
class ToolExecution:
    """One tool call (section 10 ``tool_execution``).

    Attributes:
        round: The round that asked for it.
        seq: 1-based order within the turn.
        call_id: The provider's call id.
        name: The tool name the model used.
        origin: ``builtin`` or ``mcp:<server>``; "" for an unknown tool.
        arguments: The parsed arguments, or None when unparsable (see ``raw_arguments``).
        raw_arguments: The unparsable argument text, or None.
        result: The handler's result; None for an error.
        content: The text the model received (control characters stripped, secrets redacted).
        is_error: True for an error result.
        error: The error text; None on success.
        error_code: ``unknown_tool``, ``invalid_arguments``, ``timeout``, ``not_found``, ...
        delivers_to: ``work``, ``page``, ``file`` or None.
        delivered: True when the call counts as a delivery (CO-23).
        started_at: Unix seconds.
        duration_seconds: In seconds.
        phase: ``execute`` or ``review`` (CO-30).
        iteration: The executor/review iteration, from 1 (CO-30).

    .. versionchanged:: 0.1 ``phase`` and ``iteration`` (issue 14, CO-30).
    """

    round: int
    seq: int
    call_id: str
    name: str
    origin: str
    arguments: dict[str, Any] | None
    raw_arguments: str | None
    result: Any
    content: str
    is_error: bool
    error: str | None
    error_code: str | None
    delivers_to: str | None
    delivered: bool
    started_at: float
    duration_seconds: float
    phase: Phase = "execute"
    iteration: int = 1

    @property
    def surface(self) -> str | None:
        """Where a delivering call delivered (CO-31): the built-in's ``delivers_to``, the MCP
        server's name for ``mcp:<server>``, or None for a call that delivers nowhere."""
        if self.delivers_to:
            return self.delivers_to
        if self.origin.startswith("mcp:"):
            return self.origin.removeprefix("mcp:")
        return None


@dataclass(frozen=True)
class Review:
    """What ``submit_review`` recorded (CO-30).

    Attributes:
        decision: ``done``, ``self_iterate`` or ``failed``.
        notes: The reviewer's reasons; for ``self_iterate``, what the next iteration must do.
        completed_work: What the reviewer found done (optional).
        final_artifact: The answer to hand the asker, when the reviewer wrote one; "" otherwise.
        rescued: True when the reviewer never decided (correctives ran out) and the executor's
            result was accepted as ``done`` (CO-32 rescue for the reviewer, ours).
        overturned: True when a ``done`` was overturned to ``self_iterate`` because nothing reached
            the asker (CO-31's after-review check); ``decision`` then reads ``self_iterate``.
    """

    decision: Literal["done", "self_iterate", "failed"]
    notes: str = ""
    completed_work: str = ""
    final_artifact: str = ""
    rescued: bool = False
    overturned: bool = False


@dataclass
class PhaseRecord:
    """One phase iteration (section 10 ``phase``): ``execute`` or ``review`` (CO-30).

    Attributes:
        phase: ``execute`` or ``review``.
        iteration: 1-based; one ``execute`` and (usually) one ``review`` per iteration.
        started_at: Unix seconds.
        duration_seconds: In seconds.
        system_prompt: The frozen system prompt.
        system_sections: Its named sections; their bytes sum to its UTF-8 length.
        user_prompt: The first user message.
        user_sections: Its named sections.
        max_rounds: The round cap.
        failed: True when the phase ended failed (or fenced).
        error: The failure text, or None.
        error_kind: See :data:`ErrorKind`, or None.
        rounds: Rounds run.
        input_tokens, output_tokens, cache_read_tokens, cache_write_tokens: Sums, in tokens.
        provider_key: The last serving entry, or "".
        model: The last serving model, or "".
        correctives: Corrective messages sent in this phase (CO-32; at most 2 in a row).
        rescued: True when the phase ended without its closing call (correctives ran out or
            the round cap hit): ``incomplete`` for the executor, the executor's result accepted
            for the reviewer (CO-32).
        decision: For ``review``: the decision taken (after any overturn); None otherwise.
        notes: For ``review``: the reviewer's notes; "" otherwise.

    .. versionchanged:: 0.1 ``review`` phases, ``correctives``, ``rescued``, ``decision``,
       ``notes`` (issue 14, CO-30..CO-32).
    """

    phase: Phase = "execute"
    iteration: int = 1
    started_at: float = 0.0
    duration_seconds: float = 0.0
    system_prompt: str = ""
    system_sections: tuple[Section, ...] = ()
    user_prompt: str = ""
    user_sections: tuple[Section, ...] = ()
    max_rounds: int = 0
    failed: bool = False
    error: str | None = None
    error_kind: str | None = None
    rounds: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    provider_key: str = ""
    model: str = ""
    correctives: int = 0
    rescued: bool = False
    decision: str | None = None
    notes: str = ""


@dataclass(frozen=True)
class TurnStart:
    """What is known when a turn starts (for ``agent_turn_started``).

    Attributes:
        turn_id: New per execution (UUID).
        work_key: Reproduced on redelivery (CO-19).
        seat: The seat's handle.
        agent_id: The seat's agent id.
        epoch: The applied company epoch the turn pinned.
        trigger: What woke the seat.
        started_at: Unix seconds.
        trace_id: 32 hex digits, or "" when tracing is off.
        reply_mode: The reply obligation, derived from the trigger before any model runs
            (CO-31, :func:`shared.turns.reply_obligation`).

    .. versionchanged:: 0.1 ``reply_mode`` (issue 14, CO-31).
    """

    turn_id: str
    work_key: str
    seat: str
    agent_id: str
    epoch: int
    trigger: Trigger
    started_at: float
    trace_id: str
    reply_mode: ReplyMode = "none"


@dataclass
class TurnResult:
    """A finished turn (section 10 ``turn``), with its phases, rounds and tool calls.

    Attributes:
        phases: Every phase iteration, in order: ``execute`` 1, ``review`` 1, ``execute`` 2, ...
            (CO-30). A refused turn has one failed ``execute`` phase that never ran.
        outcome: See :data:`Outcome`.
        error: Why it failed, or None.
        error_kind: See :data:`ErrorKind`, or None.
        final_text: The last executor text ("" when none).
        submission: What the last ``submit_work`` recorded, or None.
        review: The last review, or None (no review ran).
        decision: See :data:`Decision`; None when no review ran and none was skipped.
        iterations: Executor iterations run (0 for a refused turn).
        rounds: Every round, in order.
        tool_calls: Every tool call, in order.
        messages: The conversation of the last executor iteration as the model saw it (user,
            assistant, tool results, correctives).
        input_tokens, output_tokens, cache_read_tokens, cache_write_tokens: Turn totals
            (= the sum over rounds, CO-22), in tokens.
        deliveries: Names of tools whose calls delivered, in order.
        provider_keys: Entries that served, in first-use order.
        models: Models that served, in first-use order.
        work_item: The charge (CO-19), or None.
        touched: Every work item key the turn's successful tracker writes touched, in order.
        ended_at: Unix seconds.
        duration_seconds: Wall time, in seconds.
        redact: Secret values masked in every string of :meth:`to_dict` (the record), never in what
            the model is sent: a ``${NAME}`` in a goal reaches the model, not the turn record.
        budget: A ``budget_exhausted`` refusal's figures ``{scope, period, resets_at, spent,
            ceiling}`` (CO-37), or None.
        retry_after: Seconds before a redelivery can succeed, or None for the caller's ordinary
            backoff: for ``llm_unavailable``, the longer of the wait until some key of the chain
            is free (CO-42) and the longest ``Retry-After`` a provider sent (CO-12, FL-121).
        persisted: True when ``reflect_and_persist`` succeeded in the turn (AG-3, AG-6).

    .. versionchanged:: 0.1 ``phases`` (was one ``phase``), ``review``, ``decision``,
       ``iterations`` (issue 14, CO-30); ``retry_after`` also from the providers' Retry-After.
    """

    start: TurnStart
    phases: list[PhaseRecord] = field(default_factory=list)
    outcome: Outcome = "no_action"
    error: str | None = None
    error_kind: str | None = None
    final_text: str = ""
    submission: Submission | None = None
    review: Review | None = None
    decision: Decision | None = None
    iterations: int = 0
    rounds: list[RoundRecord] = field(default_factory=list)
    tool_calls: list[ToolExecution] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    deliveries: list[str] = field(default_factory=list)
    provider_keys: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    work_item: WorkItemCharge | None = None
    touched: list[str] = field(default_factory=list)
    ended_at: float = 0.0
    duration_seconds: float = 0.0
    redact: tuple[str, ...] = field(default=(), repr=False)
    budget: dict[str, Any] | None = None
    retry_after: float | None = None
    persisted: bool = False

    @property
    def phase(self) -> PhaseRecord:
        """The first phase (``execute``, iteration 1): what a one-phase reader expects.

        Raises:
            IndexError: No phase was recorded (a turn still starting).
        """
        return self.phases[0]

    @property
    def reply_mode(self) -> ReplyMode:
        """The reply obligation the turn ran under (CO-31; from :class:`TurnStart`)."""
        return self.start.reply_mode

    @property
    def reply(self) -> str:
        """The final artifact, what an ``engine`` reply hands the asker (CO-8, CO-30, CO-36):
        the reviewer's ``final_artifact`` when it wrote one, else the executor's last text,
        else the submission's summary; "" when the turn produced none. Empty for a failed turn
        or an ``incomplete`` one: those delivered nothing (CO-8)."""
        if self.failed or self.outcome == "incomplete":
            return ""
        if self.review is not None and self.review.final_artifact.strip():
            return self.review.final_artifact
        if self.final_text.strip():
            return self.final_text
        return self.submission.summary if self.submission is not None else ""

    @property
    def turn_id(self) -> str:
        """The execution's id."""
        return self.start.turn_id

    @property
    def work_key(self) -> str:
        """The unit of work's key."""
        return self.start.work_key

    @property
    def seat(self) -> str:
        """The seat's handle."""
        return self.start.seat

    @property
    def failed(self) -> bool:
        """True for ``failed`` and ``fenced``."""
        return self.outcome in ("failed", "fenced")

    @property
    def delivered_any(self) -> bool:
        """True when some delivering call succeeded (an external effect happened)."""
        return bool(self.deliveries)

    @property
    def redeliver(self) -> bool:
        """Whether the caller should NAK the delivery rather than ack it (CO-11, FL-74).

        True for a fenced turn, for a ``budget_exhausted`` refusal (CO-37: the seat's deliveries
        are parked, the refused one included, even after an effect: the rerun sees the tracker as
        the first run left it), and for a failure in :data:`REDELIVER_ERROR_KINDS` before any
        delivering call succeeded; False otherwise (a finished turn, a defect, a failure after
        an external write, or a refusal a retry would meet again).
        """
        if self.outcome == "fenced":
            return True
        if self.error_kind == "budget_exhausted":  # parked whole, effects or not (CO-37)
            return True
        return (
            self.outcome == "failed" and self.error_kind in REDELIVER_ERROR_KINDS and not self.delivered_any
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the record as JSON-able data (dataclasses become objects)."""
        out = {f: plain(getattr(self, f)) for f in _RESULT_FIELDS if f != "start"}
        start = plain(self.start)
        start["trigger"] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in start["trigger"].items()}
        out.update(start)
        out["failed"] = self.failed
        out["reply"] = self.reply
        secrets = out.pop("redact", ())
        return _masked(out, tuple(secrets)) if secrets else out


def _masked(value: Any, secrets: tuple[str, ...]) -> Any:
    """``value`` with every secret in its strings replaced by ``[redacted]`` (longest first)."""
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, "[redacted]")
        return value
    if isinstance(value, dict):
        return {k: _masked(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(v, secrets) for v in value]
    return value


_RESULT_FIELDS = tuple(f.name for f in dataclasses.fields(TurnResult))
