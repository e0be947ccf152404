"""What a turn records (company spec section 10; CO-16, CO-18, CO-19, CO-22).

Every number says its unit: times are Unix seconds (``started_at``) and seconds
(``duration_seconds``); tokens are tokens. :meth:`TurnResult.to_dict` gives the JSON shape a
recorder stores and ``GET /turns/{id}`` serves.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from shared.providers import Message, ToolCall
from shared.tools import Submission

from ._trigger import Trigger

__all__ = [
    "REDELIVER_ERROR_KINDS",
    "ErrorKind",
    "Outcome",
    "PhaseRecord",
    "RoundRecord",
    "Section",
    "ToolExecution",
    "TurnResult",
    "TurnStart",
    "WorkItemCharge",
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
]
"""Why a turn failed (CO-16, CO-18)."""

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

    A provider call that failed is not a round: it leaves no row (its span records the error).
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


@dataclass
class PhaseRecord:
    """One phase iteration (section 10 ``phase``); P0 has one, ``execute``.

    Attributes:
        phase: ``execute``.
        iteration: 1 at P0.
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
    """

    phase: str = "execute"
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


@dataclass(frozen=True)
class WorkItemCharge:
    """The one work item a turn is charged to (CO-19).

    Attributes:
        key: ``SUP-1``.
        id: The item's id when known, else None.
        project: ``SUP``.
        basis: ``trigger`` (the wake named it) or ``sole_write`` (the turn's successful
            tracker writes touched exactly this one item).
        backend: ``native`` at P0.
    """

    key: str
    id: str | None
    project: str
    basis: Literal["trigger", "sole_write"]
    backend: str = "native"


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
    """

    turn_id: str
    work_key: str
    seat: str
    agent_id: str
    epoch: int
    trigger: Trigger
    started_at: float
    trace_id: str


@dataclass
class TurnResult:
    """A finished turn (section 10 ``turn``), with its phase, rounds and tool calls.

    Attributes:
        outcome: See :data:`Outcome`.
        error: Why it failed, or None.
        error_kind: See :data:`ErrorKind`, or None.
        final_text: The last assistant text ("" when none).
        submission: What ``submit_work`` recorded, or None.
        rounds: Every round, in order.
        tool_calls: Every tool call, in order.
        messages: The whole conversation as the model saw it (user, assistant, tool results).
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
        retry_after: Seconds before a redelivery can succeed: every key of the seat's providers is
            benched that long (CO-42); None for the ordinary backoff.
    """

    start: TurnStart
    phase: PhaseRecord
    outcome: Outcome = "no_action"
    error: str | None = None
    error_kind: str | None = None
    final_text: str = ""
    submission: Submission | None = None
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
        out = dataclasses.asdict(self)
        out.pop("start")
        start = dataclasses.asdict(self.start)
        start["trigger"] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in start["trigger"].items()}
        out.update(start)
        out["failed"] = self.failed
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
