"""The httpx backends against scripted servers on loopback (CO-12, CO-13, CO-14).

One suite runs over both wire formats through the ``backend`` fixture (STYLE: one suite per
seam with two backends); format-specific checks follow.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from shared import providers
from shared.providers import (
    AssistantMessage,
    ChatRequest,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from tests.support.llm_servers import (
    AnthropicServer,
    OpenAIServer,
    Reply,
    ScriptedServer,
    anthropic_text,
    anthropic_tools,
    openai_text,
    openai_tools,
)
from tests.support.procs import free_port

TOOL = ToolSpec(
    "get_work_item", "Read one item.", {"type": "object", "properties": {"key": {"type": "string"}}}
)
REQUEST = ChatRequest("You are a test seat.", (UserMessage("hello"),), (TOOL,))


@dataclass
class Backend:
    """One wire format: its server, a provider pointed at it, and its reply builders."""

    name: str
    server: ScriptedServer
    provider: providers.HttpProvider

    def text(self, text: str, **kw: Any) -> Reply:
        return openai_text(text, **kw) if self.name == "openai" else anthropic_text(text, **kw)

    def tools(self, *calls: tuple[str, Any]) -> Reply:
        return openai_tools(*calls) if self.name == "openai" else anthropic_tools(*calls)


@pytest.fixture(params=["openai", "anthropic"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    server: ScriptedServer
    provider: providers.HttpProvider
    if request.param == "openai":
        server = OpenAIServer()
        provider = providers.OpenAICompatibleProvider(
            "local", model="m1", base_url=server.base_url, api_keys=["k1"], timeout_seconds=0.5
        )
    else:
        server = AnthropicServer()
        provider = providers.AnthropicProvider(
            "claude", model="c1", base_url=server.base_url, api_keys=["k1"], timeout_seconds=0.5
        )
    try:
        yield Backend(request.param, server, provider)
    finally:
        await provider.aclose()
        server.stop()


async def test_text_answer(backend: Backend) -> None:
    backend.server.add(backend.text("All good."))
    done = await backend.provider.complete(REQUEST)
    assert (done.text, done.tool_calls, done.stop_reason) == ("All good.", (), "end")
    assert done.input_tokens == 100 and done.output_tokens == 10
    assert done.provider_key == backend.provider.key


async def test_two_parallel_tool_calls(backend: Backend) -> None:
    backend.server.add(
        backend.tools(("get_work_item", {"key": "SUP-1"}), ("get_work_item", {"key": "SUP-2"}))
    )
    done = await backend.provider.complete(REQUEST)
    assert done.stop_reason == "tool_use"
    assert [(c.name, c.arguments) for c in done.tool_calls] == [
        ("get_work_item", {"key": "SUP-1"}),
        ("get_work_item", {"key": "SUP-2"}),
    ]
    assert len({c.id for c in done.tool_calls}) == 2


async def test_max_tokens_stop(backend: Backend) -> None:
    stop = {"finish": "length"} if backend.name == "openai" else {"stop": "max_tokens"}
    backend.server.add(backend.text("cut", **stop))
    assert (await backend.provider.complete(REQUEST)).stop_reason == "max_tokens"


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (429, providers.RateLimited, "rate_limit"),
        (402, providers.RateLimited, "rate_limit"),
        (401, providers.AuthFailed, "auth"),
        (403, providers.AuthFailed, "auth"),
        (408, providers.ProviderTimeout, "timeout"),
        (500, providers.ServerFailed, "server"),
        (529, providers.ServerFailed, "server"),
        (404, providers.FatalLLMError, "fatal"),
    ],
)
async def test_status_classes(backend: Backend, status: int, error: type[Exception], kind: str) -> None:
    backend.server.add(Reply({"error": {"type": "x", "message": "no"}}, status=status))
    with pytest.raises(error) as caught:
        await backend.provider.complete(REQUEST)
    assert isinstance(caught.value, providers.LLMError)
    assert caught.value.kind == kind and caught.value.status == status
    assert caught.value.retryable is (kind != "fatal")


async def test_rate_limit_carries_retry_after(backend: Backend) -> None:
    backend.server.add(Reply({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "7"}))
    with pytest.raises(providers.RateLimited) as caught:
        await backend.provider.complete(REQUEST)
    assert caught.value.retry_after == 7


async def test_garbage_is_malformed(backend: Backend) -> None:
    backend.server.add(Reply(b"<html>gateway</html>"), Reply({"id": "x", "object": "nothing"}))
    for _ in range(2):
        with pytest.raises(providers.MalformedResponse) as caught:
            await backend.provider.complete(REQUEST)
        assert caught.value.kind == "server" and caught.value.retryable


async def test_context_too_long_is_fatal(backend: Backend) -> None:
    message = (
        {"error": {"code": "context_length_exceeded", "message": "maximum context length is 8192 tokens"}}
        if backend.name == "openai"
        else {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}}
    )
    backend.server.add(Reply(message, status=400))
    with pytest.raises(providers.ContextTooLong) as caught:
        await backend.provider.complete(REQUEST)
    assert caught.value.kind == "fatal" and not caught.value.retryable


async def test_timeout(backend: Backend) -> None:
    backend.server.add(Reply(backend.text("late").body, delay=30))
    with pytest.raises(providers.ProviderTimeout) as caught:
        await backend.provider.complete(REQUEST)
    assert isinstance(caught.value, TimeoutError) and caught.value.kind == "timeout"


async def test_connection_refused_is_server() -> None:
    provider = providers.OpenAICompatibleProvider(
        "gone", model="m", base_url=f"http://127.0.0.1:{free_port()}/v1"
    )
    try:
        with pytest.raises(providers.ServerFailed):
            await provider.complete(REQUEST)
    finally:
        await provider.aclose()


CONVERSATION = ChatRequest(
    "system text",
    (
        UserMessage("do it"),
        AssistantMessage("thinking", (ToolCall("c1", "get_work_item", {"key": "SUP-1"}),)),
        ToolResultMessage("c1", "get_work_item", '{"error": "no"}', is_error=True),
    ),
    (TOOL, ToolSpec("submit_work", "Finish.", {"type": "object"})),
    temperature=0.2,
)


async def test_openai_request_shape() -> None:
    with OpenAIServer([openai_text("ok")]) as server:
        provider = providers.OpenAIProvider(
            "oa", model="gpt-x", base_url=server.base_url + "/", api_keys=["sk-1"]
        )
        try:
            await provider.complete(CONVERSATION)
        finally:
            await provider.aclose()
        [seen] = server.seen
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == "Bearer sk-1"
    body = seen.body
    assert body["model"] == "gpt-x" and body["max_completion_tokens"] == 4096 and body["temperature"] == 0.2
    assert body["messages"][0] == {"role": "system", "content": "system text"}
    assert body["messages"][2]["tool_calls"] == [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_work_item", "arguments": '{"key":"SUP-1"}'},
        }
    ]
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": '{"error": "no"}'}
    assert body["tools"][0] == {
        "type": "function",
        "function": {"name": TOOL.name, "description": TOOL.description, "parameters": TOOL.parameters},
    }
    assert body["tool_choice"] == "auto"


async def test_openai_compatible_keyless_and_unparsable_arguments() -> None:
    with OpenAIServer([openai_tools(("get_work_item", "{not json"))]) as server:
        provider = providers.OpenAICompatibleProvider("local", model="q", base_url=server.base_url)
        try:
            done = await provider.complete(REQUEST)
        finally:
            await provider.aclose()
        assert "authorization" not in server.seen[0].headers
        assert "max_tokens" in server.seen[0].body and "temperature" not in server.seen[0].body
    [call] = done.tool_calls
    assert call.arguments is None and call.raw_arguments == "{not json"


async def test_openai_cached_tokens() -> None:
    with OpenAIServer([openai_text("ok", prompt_tokens=2000, cached=1800)]) as server:
        provider = providers.OpenAICompatibleProvider("local", model="q", base_url=server.base_url)
        try:
            done = await provider.complete(REQUEST)
        finally:
            await provider.aclose()
    assert (done.input_tokens, done.cache_read_tokens) == (2000, 1800)


async def test_anthropic_request_shape_and_cache_usage() -> None:
    reply = anthropic_text("ok", input_tokens=200, cache_read=1800, cache_write=0)
    with AnthropicServer([reply]) as server:
        provider = providers.AnthropicProvider(
            "claude", model="claude-x", base_url=server.base_url, api_keys=["ak"]
        )
        try:
            done = await provider.complete(CONVERSATION)
        finally:
            await provider.aclose()
        [seen] = server.seen
    # CO-14's check: cache_read 1800 + input 200 reports input 2000, cache read 1800.
    assert (done.input_tokens, done.cache_read_tokens, done.cache_write_tokens) == (2000, 1800, 0)
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == "ak" and seen.headers["anthropic-version"] == "2023-06-01"
    body = seen.body
    assert body["system"] == [{"type": "text", "text": "system text", "cache_control": {"type": "ephemeral"}}]
    assert "cache_control" not in body["tools"][0] and body["tools"][-1]["cache_control"] == {
        "type": "ephemeral"
    }
    assert body["tools"][0]["input_schema"] == TOOL.parameters
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "thinking"},
        {"type": "tool_use", "id": "c1", "name": "get_work_item", "input": {"key": "SUP-1"}},
    ]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": '{"error": "no"}', "is_error": True}
    ]
    assert body["max_tokens"] == 4096 and body["temperature"] == 0.2


def test_retry_after_forms() -> None:
    assert providers.parse_retry_after("7") == 7
    assert providers.parse_retry_after(None) is None
    assert providers.parse_retry_after("soon") is None
    assert providers.parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10
