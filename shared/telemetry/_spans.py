"""Span names and attribute keys of a turn's trace (CO-21), and the log-line processor (FL-6).

The tree (CO-21)::

    agent.turn                      child of the trigger's trace context
    └── agent.turn.execute          one per phase iteration
        ├── chat <model>            one per provider round (GenAI conventions)
        └── execute_tool <name>     one per tool call

Attribute keys follow the OpenTelemetry GenAI semantic conventions where one exists
(``gen_ai.*``) and use ``crewlet.*`` otherwise. Content (prompts, answers, tool arguments and
results) goes on spans only when ``telemetry.capture_content`` is true (CO-21).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from ._propagation import current_trace_ids

__all__ = [
    "GEN_AI_AGENT_NAME",
    "GEN_AI_INPUT_MESSAGES",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_OUTPUT_MESSAGES",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MAX_TOKENS",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_SYSTEM_INSTRUCTIONS",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "SPAN_CHAT",
    "SPAN_EXECUTE_TOOL",
    "SPAN_PHASE",
    "SPAN_TURN",
    "add_trace_context",
    "provider_name",
]

SPAN_TURN = "agent.turn"
SPAN_PHASE = "agent.turn.{phase}"
SPAN_CHAT = "chat {model}"
SPAN_EXECUTE_TOOL = "execute_tool {name}"

GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"

_PROVIDER_NAMES = {"openai": "openai", "openai-compatible": "openai", "anthropic": "anthropic"}


def provider_name(provider_type: str) -> str:
    """Return ``gen_ai.provider.name`` for an entry type (``crewlet.offline`` for offline)."""
    return _PROVIDER_NAMES.get(provider_type, f"crewlet.{provider_type or 'unknown'}")


def add_trace_context(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A structlog processor: add ``trace_id`` and ``span_id`` inside a span, nothing outside
    (FL-6). The composition root passes it in :func:`shared.logs.configure`'s ``processors``."""
    ids = current_trace_ids()
    if ids is not None:
        event_dict.setdefault("trace_id", ids[0])
        event_dict.setdefault("span_id", ids[1])
    return event_dict
