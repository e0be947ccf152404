"""The ``openai`` and ``openai-compatible`` backends (CO-13): ``POST {base}/chat/completions``.

Tools go out as ``{"type": "function", "function": {name, description, parameters}}``;
assistant tool calls and ``tool`` messages round-trip with their ids. The system prompt is the
first message, so servers with automatic prefix caching hit it. ``finish_reason`` maps
``stop``→``end``, ``tool_calls``→``tool_use``, ``length``→``max_tokens``,
``content_filter``→``refusal``; ``usage.prompt_tokens_details.cached_tokens`` is
``cache_read_tokens``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ._http import HttpProvider, loads_arguments, token_count
from ._types import (
    AssistantMessage,
    ChatRequest,
    Completion,
    Message,
    StopReason,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)

__all__ = ["OPENAI_BASE_URL", "OpenAICompatibleProvider", "OpenAIProvider"]

OPENAI_BASE_URL = "https://api.openai.com/v1"
"""The ``openai`` type's base URL (CO-13)."""

_FINISH: dict[str, StopReason] = {
    "stop": "end",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def _tool(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": spec.name, "description": spec.description, "parameters": spec.parameters},
    }


def _message(message: Message) -> dict[str, Any]:
    if isinstance(message, UserMessage):
        return {"role": "user", "content": message.text}
    if isinstance(message, ToolResultMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    assert isinstance(message, AssistantMessage)
    out: dict[str, Any] = {"role": "assistant", "content": message.text or None}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments_json()},
            }
            for c in message.tool_calls
        ]
    return out


class OpenAICompatibleProvider(HttpProvider):
    """``type: openai-compatible``: any server speaking the Chat Completions API (vLLM,
    llama.cpp, Ollama, LiteLLM, ...). ``base_url`` is required; a keyless entry sends no
    ``Authorization`` header. See :class:`~shared.providers.HttpProvider` for the arguments.
    """

    type: ClassVar[str] = "openai-compatible"
    _max_tokens_field: ClassVar[str] = "max_tokens"

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "system", "content": request.system}]
            + [_message(m) for m in request.messages],
            self._max_tokens_field: request.max_output_tokens or self.max_output_tokens,
        }
        if request.tools:
            body["tools"] = [_tool(t) for t in request.tools]
            body["tool_choice"] = request.tool_choice
        temperature = request.temperature if request.temperature is not None else self.temperature
        if temperature is not None:
            body["temperature"] = temperature
        return body

    async def complete(self, request: ChatRequest) -> Completion:
        """Make one ``/chat/completions`` call (CO-13); see :meth:`LlmProvider.complete`."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = await self._post_json(f"{self.base_url}/chat/completions", headers, self._body(request))
        return self._parse(data)

    def _parse(self, data: dict[str, Any]) -> Completion:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._malformed("has no choices[0]")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise self._malformed("has no choices[0].message")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise self._malformed("content is not a string")
        calls: list[ToolCall] = []
        raw_calls = message.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise self._malformed("tool_calls is not a list")
        for i, raw in enumerate(raw_calls):
            function = raw.get("function") if isinstance(raw, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise self._malformed(f"tool_calls[{i}] has no function name")
            arguments, raw_arguments = loads_arguments(function.get("arguments", ""))
            call_id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else f"call-{i}"
            calls.append(ToolCall(str(call_id), function["name"], arguments, raw_arguments))
        finish = choices[0].get("finish_reason")
        fallback: StopReason = "tool_use" if calls else "end"
        stop = _FINISH.get(finish, fallback) if isinstance(finish, str) else fallback
        if calls and stop == "end":  # some compatible servers say "stop" beside tool calls
            stop = "tool_use"
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else 0
        return Completion(
            text=content or "",
            tool_calls=tuple(calls),
            stop_reason=stop,
            model=str(data.get("model") or self.model),
            input_tokens=token_count(usage.get("prompt_tokens")),
            output_tokens=token_count(usage.get("completion_tokens")),
            cache_read_tokens=token_count(cached),
            cache_write_tokens=0,
            provider_key=self.key,
            provider_type=self.type,
        )


class OpenAIProvider(OpenAICompatibleProvider):
    """``type: openai``: OpenAI itself, base ``https://api.openai.com/v1`` unless ``base_url``
    says otherwise. Sends ``max_completion_tokens`` (the field OpenAI's current models take)."""

    type: ClassVar[str] = "openai"
    _max_tokens_field: ClassVar[str] = "max_completion_tokens"
