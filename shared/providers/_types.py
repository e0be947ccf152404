"""The request and answer of one provider call (CO-12).

Plain frozen dataclasses, the same for every backend: the executor builds a
:class:`ChatRequest`, a backend turns it into its wire format and its answer into a
:class:`Completion`. Nothing here knows HTTP.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "AssistantMessage",
    "ChatRequest",
    "Completion",
    "Message",
    "RequestContext",
    "StopReason",
    "ToolCall",
    "ToolResultMessage",
    "ToolSpec",
    "UserMessage",
    "plain",
]

_SCALARS = (str, int, float, bool, type(None))
_FIELDS: dict[type, tuple[str, ...]] = {}


def plain(value: Any) -> Any:
    """``dataclasses.asdict`` for any value, at a fraction of its cost (issue 16).

    The same result: a dataclass becomes a dict of its fields, recursively; lists, tuples (named
    ones too) and dicts (as plain dicts) are rebuilt with their items made plain; anything else is
    deep-copied.
    The field names of each class are looked up once (``asdict`` calls ``fields`` for every
    instance, which dominated a turn's record and its prompt size estimate).
    """
    if isinstance(value, _SCALARS):
        return value
    cls = type(value)
    names = _FIELDS.get(cls)
    if names is None and dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(value))
    if names is not None:
        return {n: plain(getattr(value, n)) for n in names}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        if hasattr(value, "_fields"):  # a named tuple, rebuilt as asdict does
            return cls(*[plain(v) for v in value])
        return cls(plain(v) for v in value)
    return copy.deepcopy(value)


StopReason = Literal["end", "tool_use", "max_tokens", "refusal", "context_exceeded", "paused"]
"""CO-12's normalised stop reasons (orig vocabulary)."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it (CO-12, CO-23).

    Attributes:
        name: Unique on the surface.
        description: One paragraph for the model.
        parameters: A JSON Schema object (``{"type": "object", "properties": ...}``).
    """

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model asked for.

    Attributes:
        id: The provider's call id; the result goes back with it.
        name: The tool's name, as the model wrote it (it may name no tool).
        arguments: The parsed argument object; None when the model's text did not parse as a
            JSON object (then ``raw_arguments`` holds it).
        raw_arguments: The unparsable argument text, or None when ``arguments`` is set.
    """

    id: str
    name: str
    arguments: dict[str, Any] | None = None
    raw_arguments: str | None = None

    def arguments_json(self) -> str:
        """Return the arguments as the JSON text a wire format carries (``raw_arguments`` as is)."""
        if self.arguments is None:
            return self.raw_arguments or ""
        return json.dumps(self.arguments, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class UserMessage:
    """A user turn of the conversation: the trigger, rendered (CO-17)."""

    text: str
    role: Literal["user"] = "user"


@dataclass(frozen=True)
class AssistantMessage:
    """What the model answered in an earlier round: text and/or tool calls."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    role: Literal["assistant"] = "assistant"


@dataclass(frozen=True)
class ToolResultMessage:
    """The result of one tool call, sent back in full (CO-16).

    Attributes:
        tool_call_id: The :attr:`ToolCall.id` it answers.
        name: The tool's name.
        content: The result text (JSON for built-ins).
        is_error: True when the call failed (unknown tool, bad arguments, a refused write).
    """

    tool_call_id: str
    name: str
    content: str
    is_error: bool = False
    role: Literal["tool"] = "tool"


Message = UserMessage | AssistantMessage | ToolResultMessage
"""One entry of a conversation."""


@dataclass(frozen=True)
class RequestContext:
    """Who is asking and why, for providers that decide from it rather than from the text.

    Real vendors ignore it; the offline provider (CO-15) matches its rules and fills its
    templates from it.

    Attributes:
        seat: The seat's handle.
        managers: The seat's managers' handles, in document order.
        reports: The seat's direct reports' handles, in document order.
        trigger_type: ``external_notification``, ``task_assigned``, ...
        source: The trigger's source (``api``, ``work``, ``webhook:forms``, ``github``).
        reason: The trigger's reason (``assigned``, ...), or "".
        text: The trigger's full text.
        first_line: Its first non-empty line.
        work_item_key: The item the trigger names, or "".
        sender: Who sent it, or "".
    """

    seat: str
    managers: tuple[str, ...] = ()
    reports: tuple[str, ...] = ()
    trigger_type: str = ""
    source: str = ""
    reason: str = ""
    text: str = ""
    first_line: str = ""
    work_item_key: str = ""
    sender: str = ""


@dataclass(frozen=True)
class ChatRequest:
    """One provider call (CO-12).

    Attributes:
        system: The frozen system prompt.
        messages: The conversation so far, oldest first.
        tools: The tool surface.
        max_output_tokens: Cap on the answer, in tokens; None for the entry's
            ``max_output_tokens`` (4096 by default).
        temperature: None for the entry's ``temperature`` (unset: the vendor default).
        tool_choice: Always ``auto`` at P0.
        context: See :class:`RequestContext`; None when the caller has none.
    """

    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_output_tokens: int | None = None
    temperature: float | None = None
    tool_choice: Literal["auto"] = "auto"
    context: RequestContext | None = None


@dataclass(frozen=True)
class Completion:
    """A provider's answer (CO-12).

    Attributes:
        text: The assistant text ("" when it only called tools).
        tool_calls: The calls asked for, in order.
        stop_reason: Normalised (:data:`StopReason`).
        model: The model that actually served.
        input_tokens: The **full** prompt count, cached parts included, in tokens.
        output_tokens: In tokens.
        cache_read_tokens: The part of ``input_tokens`` read from a cache (never added on top).
        cache_write_tokens: The part of ``input_tokens`` written to a cache.
        provider_key: The ``providers.llm`` key that served.
        provider_type: The entry's type (``openai``, ``openai-compatible``, ``anthropic``,
            ``offline``).
    """

    text: str
    tool_calls: tuple[ToolCall, ...]
    stop_reason: StopReason
    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    provider_key: str = ""
    provider_type: str = ""
