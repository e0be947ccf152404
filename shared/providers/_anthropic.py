"""The ``anthropic`` backend (CO-14): ``POST {base}/v1/messages`` with ``anthropic-version``.

The system prompt goes as one text block with ``cache_control: ephemeral``, and the last tool
definition carries a cache breakpoint too, so the frozen prefix (system + tools) is cached.
Tools go as ``{name, description, input_schema}``; tool results go back as ``tool_result``
blocks in a ``user`` message. ``input_tokens`` reported upward is the **sum** of
``input_tokens``, ``cache_creation_input_tokens`` and ``cache_read_input_tokens``.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from ._http import HttpProvider, token_count
from ._types import (
    AssistantMessage,
    ChatRequest,
    Completion,
    Message,
    StopReason,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

__all__ = ["ANTHROPIC_BASE_URL", "ANTHROPIC_VERSION", "AnthropicProvider"]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
"""The default base (CO-14); ``/v1/messages`` is appended."""
ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header value (CO-14)."""

_STOP: dict[str, StopReason] = {
    "end_turn": "end",
    "stop_sequence": "end",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "refusal": "refusal",
    "pause_turn": "paused",
    "model_context_window_exceeded": "context_exceeded",
}
_EPHEMERAL = {"type": "ephemeral"}


def _messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Turn the conversation into Messages API turns: consecutive user-side entries (a user
    text, tool results) merge into one ``user`` message, since the API alternates roles."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, AssistantMessage):
            blocks: list[dict[str, Any]] = []
            if message.text:
                blocks.append({"type": "text", "text": message.text})
            for call in message.tool_calls:
                # Arguments that never parsed (another vendor's round in a fallback chain) go as
                # an empty object: the API accepts only objects, and the error result that
                # followed tells the model what went wrong.
                blocks.append(
                    {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments or {}}
                )
            out.append({"role": "assistant", "content": blocks or [{"type": "text", "text": ""}]})
            continue
        block: dict[str, Any]
        if isinstance(message, ToolResultMessage):
            block = {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content}
            if message.is_error:
                block["is_error"] = True
        else:
            assert isinstance(message, UserMessage)
            block = {"type": "text", "text": message.text}
        if out and out[-1]["role"] == "user":
            out[-1]["content"].append(block)
        else:
            out.append({"role": "user", "content": [block]})
    return out


class AnthropicProvider(HttpProvider):
    """``type: anthropic`` (CO-14). ``base_url`` defaults to ``https://api.anthropic.com`` (a
    trailing ``/v1`` is tolerated). See :class:`~shared.providers.HttpProvider` for the
    arguments."""

    type: ClassVar[str] = "anthropic"

    def _url(self) -> str:
        base = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
        return f"{base}/v1/messages"

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_output_tokens or self.max_output_tokens,
            "system": [{"type": "text", "text": request.system, "cache_control": _EPHEMERAL}],
            "messages": _messages(request.messages),
        }
        if request.tools:
            tools = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
            tools[-1]["cache_control"] = _EPHEMERAL
            body["tools"] = tools
            body["tool_choice"] = {"type": request.tool_choice}
        temperature = request.temperature if request.temperature is not None else self.temperature
        if temperature is not None:
            body["temperature"] = temperature
        return body

    async def complete(self, request: ChatRequest) -> Completion:
        """Make one Messages API call (CO-14); see :meth:`LlmProvider.complete`."""
        headers = {
            "Content-Type": "application/json",
            "x-api-key": self.api_key,
            "anthropic-version": ANTHROPIC_VERSION,
        }
        data = await self._post_json(self._url(), headers, self._body(request))
        return self._parse(data)

    def _parse(self, data: dict[str, Any]) -> Completion:
        content = data.get("content")
        if not isinstance(content, list):
            raise self._malformed("has no content list")
        texts: list[str] = []
        calls: list[ToolCall] = []
        for i, block in enumerate(content):
            if not isinstance(block, dict):
                raise self._malformed(f"content[{i}] is not an object")
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "tool_use":
                name, call_id, given = block.get("name"), block.get("id"), block.get("input")
                if not isinstance(name, str) or not isinstance(call_id, str):
                    raise self._malformed(f"content[{i}] tool_use has no id or name")
                if isinstance(given, dict):
                    calls.append(ToolCall(call_id, name, given))
                else:
                    calls.append(ToolCall(call_id, name, None, json.dumps(given)))
        stop_raw = data.get("stop_reason")
        fallback: StopReason = "tool_use" if calls else "end"
        stop = _STOP.get(stop_raw, fallback) if isinstance(stop_raw, str) else fallback
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        fresh = token_count(usage.get("input_tokens"))
        written = token_count(usage.get("cache_creation_input_tokens"))
        read = token_count(usage.get("cache_read_input_tokens"))
        return Completion(
            text="".join(texts),
            tool_calls=tuple(calls),
            stop_reason=stop,
            model=str(data.get("model") or self.model),
            input_tokens=fresh + written + read,
            output_tokens=token_count(usage.get("output_tokens")),
            cache_read_tokens=read,
            cache_write_tokens=written,
            provider_key=self.key,
            provider_type=self.type,
        )
