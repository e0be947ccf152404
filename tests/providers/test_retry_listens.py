"""A provider's ``Retry-After`` reaches the turn, and calls per key are bounded (issue 14, CO-12).

- every error status keeps the server's ``Retry-After`` (seconds or an HTTP date), including the
  ``server`` class (503, Anthropic's 529 ``overloaded_error`` with ``retry-after: 10``), which
  is never benched;
- :attr:`LLMUnavailable.retry_after` is the largest a server said, capped at
  :data:`MAX_RETRY_AFTER`, and :meth:`ProviderChain.free_in` carries it, so the turn's
  redelivery waits as asked;
- at most ``max_concurrent`` calls per API key are in flight at once.
"""

from __future__ import annotations

import asyncio
import email.utils
import threading
import time
from typing import Any

import pytest

from shared import providers
from shared.config import LlmProvider
from shared.providers import ChatRequest, LLMUnavailable, UserMessage
from tests.main_job.llm import OpenAIRouted
from tests.support.llm_servers import AnthropicServer, OpenAIServer, Reply, anthropic_text, openai_text

REQUEST = ChatRequest("You are a test seat.", (UserMessage("hello"),))
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


async def test_anthropic_529_overloaded_keeps_its_retry_after() -> None:
    server = AnthropicServer([Reply(OVERLOADED, status=529, headers={"retry-after": "10"})])
    provider = providers.AnthropicProvider("claude", model="c1", base_url=server.base_url, api_keys=["k1"])
    try:
        with pytest.raises(providers.ServerFailed) as caught:
            await provider.complete(REQUEST)
    finally:
        await provider.aclose()
        server.stop()
    assert caught.value.kind == "server" and caught.value.status == 529
    assert caught.value.retry_after == 10
    assert "overloaded_error" in str(caught.value)


async def test_503_with_an_http_date_keeps_its_retry_after() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    server = OpenAIServer([Reply({"error": {"message": "busy"}}, status=503, headers={"Retry-After": when})])
    provider = providers.OpenAICompatibleProvider("local", model="m1", base_url=server.base_url)
    try:
        with pytest.raises(providers.ServerFailed) as caught:
            await provider.complete(REQUEST)
    finally:
        await provider.aclose()
        server.stop()
    assert caught.value.retry_after is not None and 27 <= caught.value.retry_after <= 30


def test_unavailable_retry_after_is_the_largest_a_server_said_capped() -> None:
    said = providers.ServerFailed("a: 529", provider_key="a", status=529, retry_after=3)
    silent = providers.ServerFailed("b: 500", provider_key="b", status=500)
    assert LLMUnavailable(["a", "b"], [("a", said), ("b", silent)]).retry_after == 3
    assert LLMUnavailable(["b"], [("b", silent)]).retry_after is None
    assert LLMUnavailable(["a"], []).retry_after is None
    hour = providers.ServerFailed("a: 503", provider_key="a", status=503, retry_after=3600)
    assert LLMUnavailable(["a"], [("a", hour)]).retry_after == providers.MAX_RETRY_AFTER == 300
    # a member skipped for its bench (no status: no server said it) is free_in's business
    benched = providers.RateLimited("a: cooling down", provider_key="a", retry_after=900)
    assert LLMUnavailable(["a", "b"], [("a", benched), ("b", silent)]).retry_after is None


async def test_the_chain_carries_the_servers_retry_after_to_free_in() -> None:
    first = AnthropicServer(
        [Reply(OVERLOADED, status=529, headers={"retry-after": "4"}), anthropic_text("ok")]
    )
    second = OpenAIServer([Reply({"error": {"message": "boom"}}, status=500)])
    members = [
        providers.AnthropicProvider("claude", model="c1", base_url=first.base_url, api_keys=["k1"]),
        providers.OpenAICompatibleProvider("local", model="m1", base_url=second.base_url),
    ]
    chain = providers.ProviderChain(["claude", "local"], members)
    try:
        assert chain.free_in() is None
        with pytest.raises(LLMUnavailable) as caught:
            await chain.complete(REQUEST)
        assert caught.value.retry_after == 4
        left = chain.free_in()
        assert left is not None and 3.0 < left <= 4.0
        assert (await chain.complete(REQUEST)).provider_key == "claude"
        assert chain.free_in() is None  # an answer clears what the servers asked
    finally:
        for m in members:
            await m.aclose()
        first.stop()
        second.stop()


async def test_calls_per_api_key_are_bounded() -> None:
    lock = threading.Lock()
    now = {"in_flight": 0, "most": 0}

    def respond(seat: str, body: Any) -> Reply:
        with lock:
            now["in_flight"] += 1
            now["most"] = max(now["most"], now["in_flight"])
        time.sleep(0.3)  # the server holds each call: the client keeps its slot meanwhile
        with lock:
            now["in_flight"] -= 1
        return openai_text("ok")

    with OpenAIRouted(respond=respond) as server:
        provider = providers.OpenAICompatibleProvider(
            "local", model="m1", base_url=server.base_url, api_keys=["k1"], max_concurrent=2
        )
        try:
            answers = await asyncio.gather(*(provider.complete(REQUEST) for _ in range(5)))
        finally:
            await provider.aclose()
    assert [a.text for a in answers] == ["ok"] * 5
    assert now["most"] == 2, now
    assert len(server.requests()) == 5


def test_the_bound_defaults_and_refuses_nonsense() -> None:
    provider = providers.OpenAICompatibleProvider("local", model="m1", base_url="http://127.0.0.1:9/v1")
    assert provider.max_concurrent == providers.DEFAULT_MAX_CONCURRENT == 8
    with pytest.raises(ValueError, match=r"providers\.llm\.local\.max_concurrent"):
        providers.OpenAICompatibleProvider("local", model="m1", base_url="http://x/v1", max_concurrent=0)


def test_the_entry_sets_the_bound() -> None:
    entry = LlmProvider(
        type="openai-compatible", model="q", base_url="http://127.0.0.1:9/v1", max_concurrent=3
    )
    provider = providers.build_provider("local", entry)
    assert isinstance(provider, providers.HttpProvider) and provider.max_concurrent == 3
    default = providers.build_provider(
        "local", LlmProvider(type="openai-compatible", model="q", base_url="http://x/v1")
    )
    assert isinstance(default, providers.HttpProvider) and default.max_concurrent == 8
