"""The two LLM wires as the scripted servers see them: reply builders and request readers, so a
test can script a turn and then read back what the node sent (tool definitions, tool results)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from tests.support.llm_servers import Reply, anthropic_tools, openai_tools

from .llm import AnthropicRouted, OpenAIRouted, RoutedServer

__all__ = ["ANTHROPIC", "OPENAI", "ToolResult", "Wire"]


@dataclass(frozen=True)
class ToolResult:
    """A tool result the node sent back to the model."""

    call_id: str
    content: Any
    is_error: bool


class Wire(Protocol):
    """What a test needs of one wire."""

    name: str
    server: type[RoutedServer]

    def entry(self, server: RoutedServer, **extra: Any) -> dict[str, Any]:
        """The ``providers.llm`` entry pointing at ``server``."""
        ...

    def tools(self, *calls: tuple[str, Any]) -> Reply:
        """A reply asking for ``calls`` (``(name, arguments)``)."""
        ...

    def tool_names(self, body: Any) -> list[str]:
        """The tool names a request offered."""
        ...

    def tool_schema(self, body: Any, name: str) -> dict[str, Any]:
        """The argument schema a request gave for tool ``name``."""
        ...

    def user_text(self, body: Any) -> str:
        """The first user message's text."""
        ...

    def call_ids(self, body: Any) -> list[str]:
        """The ids of the tool calls the assistant made, as echoed in the request's history."""
        ...

    def results(self, body: Any) -> list[ToolResult]:
        """The tool results in the request's history, in order."""
        ...

    def auth(self, headers: dict[str, str]) -> str:
        """The API key the request carried."""
        ...


def _loads(text: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


class _OpenAI:
    name = "openai-compatible"
    server: type[RoutedServer] = OpenAIRouted

    def entry(self, server: RoutedServer, **extra: Any) -> dict[str, Any]:
        assert isinstance(server, OpenAIRouted)
        return {
            "type": "openai-compatible",
            "model": "scripted-model",
            "base_url": server.base_url,
            "api_keys": ["test-key"],
            **extra,
        }

    def tools(self, *calls: tuple[str, Any]) -> Reply:
        return openai_tools(*calls)

    def tool_names(self, body: Any) -> list[str]:
        return [t["function"]["name"] for t in body.get("tools", [])]

    def tool_schema(self, body: Any, name: str) -> dict[str, Any]:
        return dict(next(t["function"]["parameters"] for t in body["tools"] if t["function"]["name"] == name))

    def user_text(self, body: Any) -> str:
        return str(next(m["content"] for m in body["messages"] if m["role"] == "user"))

    def call_ids(self, body: Any) -> list[str]:
        return [
            c["id"] for m in body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []
        ]

    def results(self, body: Any) -> list[ToolResult]:
        out = []
        for m in body["messages"]:
            if m["role"] == "tool":
                content = _loads(m["content"])
                is_error = isinstance(content, dict) and "error" in content and "code" in content
                out.append(ToolResult(m["tool_call_id"], content, is_error))
        return out

    def auth(self, headers: dict[str, str]) -> str:
        return headers.get("authorization", "").removeprefix("Bearer ")


class _Anthropic:
    name = "anthropic"
    server: type[RoutedServer] = AnthropicRouted

    def entry(self, server: RoutedServer, **extra: Any) -> dict[str, Any]:
        assert isinstance(server, AnthropicRouted)
        return {
            "type": "anthropic",
            "model": "scripted-claude",
            "base_url": server.base_url,
            "api_keys": ["test-key"],
            **extra,
        }

    def tools(self, *calls: tuple[str, Any]) -> Reply:
        return anthropic_tools(*calls)

    def tool_names(self, body: Any) -> list[str]:
        return [t["name"] for t in body.get("tools", [])]

    def tool_schema(self, body: Any, name: str) -> dict[str, Any]:
        return dict(next(t["input_schema"] for t in body["tools"] if t["name"] == name))

    def user_text(self, body: Any) -> str:
        first = next(m for m in body["messages"] if m["role"] == "user")
        return "".join(b.get("text", "") for b in first["content"] if b["type"] == "text")

    def call_ids(self, body: Any) -> list[str]:
        return [
            b["id"]
            for m in body["messages"]
            if m["role"] == "assistant"
            for b in m["content"]
            if b["type"] == "tool_use"
        ]

    def results(self, body: Any) -> list[ToolResult]:
        return [
            ToolResult(b["tool_use_id"], _loads(b["content"]), bool(b.get("is_error")))
            for m in body["messages"]
            if m["role"] == "user"
            for b in m["content"]
            if b["type"] == "tool_result"
        ]

    def auth(self, headers: dict[str, str]) -> str:
        return headers.get("x-api-key", "")


OPENAI: Wire = _OpenAI()
ANTHROPIC: Wire = _Anthropic()
