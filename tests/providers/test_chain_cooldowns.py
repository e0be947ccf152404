"""The provider chain with the node's cooldown board (CO-3, CO-42): benched keys are not called.

Real httpx calls against scripted loopback servers (tests/support/llm_servers.py); the board has
no store here (a single node), which benches locally all the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
import structlog

from shared import providers
from shared.config import Company, Cooldowns, LlmProvider
from shared.providers import ChatRequest, CooldownBoard, UserMessage, key_hint
from tests.support.llm_servers import OpenAIServer, Reply, openai_text

REQUEST = ChatRequest("sys", (UserMessage("hi"),))


def _entry(server: OpenAIServer, *keys: str, cooldowns: Cooldowns | None = None) -> LlmProvider:
    return LlmProvider(
        type="openai-compatible",
        model="m",
        base_url=server.base_url,
        api_keys=list(keys),
        cooldowns=cooldowns or Cooldowns(),
    )


def _keys(server: OpenAIServer) -> list[str]:
    return [s.headers["authorization"].removeprefix("Bearer ") for s in server.seen]


@contextmanager
def _servers(n: int) -> Iterator[list[OpenAIServer]]:
    started = [OpenAIServer() for _ in range(n)]
    try:
        yield started
    finally:
        for server in started:
            server.stop()


async def test_a_429_on_key_1_uses_key_2_and_later_calls_skip_key_1_without_calling_it() -> None:
    board = CooldownBoard(None, "a")
    with _servers(2) as (first, second):
        first.add(Reply({}, status=429, headers={"Retry-After": "120"}), openai_text("one"))
        first.add(Reply({}, status=429))  # key 2 rate-limited too on the second call
        second.add(openai_text("from b"))
        built = providers.ProviderSet(
            {
                "a": providers.build_provider("a", _entry(first, "k1", "k2")),
                "b": providers.build_provider("b", _entry(second, "k3")),
            },
            board=board,
        )
        chain = built.chain(["a", "b"])
        try:
            assert (await chain.complete(REQUEST)).text == "one"
            # without the board, a 429 on k2 would rotate back to k1 and call it
            done = await chain.complete(REQUEST)
        finally:
            await built.aclose()
        assert _keys(first) == ["k1", "k2", "k2"]
        assert _keys(second) == ["k3"]
    assert done.provider_key == "b" and done.text == "from b"
    bench = board.bench_of("a", "k1")
    assert bench is not None and bench.kind == "rate_limit"
    assert (bench.until - datetime.now(UTC)) > timedelta(seconds=100)  # Retry-After: 120
    assert board.is_benched("a", "k2") and not board.is_benched("b", "k3")


async def test_a_set_built_at_a_later_apply_skips_the_benched_key_at_once() -> None:
    # the board is node-wide and outlives applies: a fresh ProviderSet starts at key 1 again
    board = CooldownBoard(None, "a")
    with _servers(1) as (server,):
        server.add(Reply({}, status=429), openai_text("one"), openai_text("two"))
        company = Company.model_validate(
            {
                "name": "acme",
                "providers": {"llm": {"default": _entry(server, "k1", "k2").model_dump(exclude_none=True)}},
            }
        )
        first = providers.build_providers(company, env={}, board=board)
        try:
            assert (await first.chain(["default"]).complete(REQUEST)).text == "one"
        finally:
            await first.aclose()
        second = providers.build_providers(company, env={}, board=board)
        try:
            assert second.providers["default"].key_index == 0
            assert (await second.chain(["default"]).complete(REQUEST)).text == "two"
        finally:
            await second.aclose()
        assert _keys(server) == ["k1", "k2", "k2"]


async def test_an_entry_whose_every_key_is_benched_is_skipped_for_the_next() -> None:
    board = CooldownBoard(None, "a")
    await board.bench("a", "k1", "rate_limit")
    await board.bench("a", "k2", "auth")
    with _servers(2) as (first, second):
        second.add(openai_text("b answers"))
        built = providers.ProviderSet(
            {
                "a": providers.build_provider("a", _entry(first, "k1", "k2")),
                "b": providers.build_provider("b", _entry(second, "k3")),
            },
            board=board,
        )
        chain = built.chain(["a", "b"])
        try:
            assert chain.estimate(REQUEST) == built.providers["b"].estimate(REQUEST)
            with structlog.testing.capture_logs() as logs:
                done = await chain.complete(REQUEST)
        finally:
            await built.aclose()
        assert first.seen == []
    assert done.provider_key == "b"
    assert [e for e in logs if e["event"] == "llm_entry_benched"][0]["provider_key"] == "a"


async def test_every_entry_benched_is_unavailable_naming_the_bench_without_a_call() -> None:
    board = CooldownBoard(None, "a")
    await board.bench("a", "k1", "rate_limit", retry_after=300)
    with _servers(1) as (server,):
        built = providers.ProviderSet({"a": providers.build_provider("a", _entry(server, "k1"))}, board=board)
        try:
            with pytest.raises(providers.LLMUnavailable) as caught:
                await built.chain(["a"]).complete(REQUEST)
        finally:
            await built.aclose()
        assert server.seen == []
    last = caught.value.last_error
    assert isinstance(last, providers.RateLimited) and last.status is None
    assert last.retry_after is not None and 200 < last.retry_after <= 300
    assert "cooling down" in str(last) and "k1" not in str(last)


async def test_an_auth_failure_benches_for_the_entry_setting() -> None:
    board = CooldownBoard(None, "a")
    with _servers(1) as (server,):
        server.add(Reply({}, status=401), openai_text("ok"))
        entry = _entry(server, "k1", "k2", cooldowns=Cooldowns(rate_limit_seconds=3600, auth_seconds=900))
        built = providers.ProviderSet({"a": providers.build_provider("a", entry)}, board=board)
        try:
            assert (await built.chain(["a"]).complete(REQUEST)).text == "ok"
        finally:
            await built.aclose()
    bench = board.bench_of("a", "k1")
    assert bench is not None and bench.kind == "auth" and bench.hint == key_hint("k1")
    left = (bench.until - datetime.now(UTC)).total_seconds()
    assert 800 < left <= 900


async def test_a_keyless_entry_that_is_rate_limited_is_benched_whole() -> None:
    board = CooldownBoard(None, "a")
    with _servers(2) as (local, backup):
        local.add(Reply({}, status=429))
        backup.add(openai_text("one"), openai_text("two"))
        built = providers.ProviderSet(
            {
                "local": providers.build_provider("local", _entry(local)),
                "backup": providers.build_provider("backup", _entry(backup, "k")),
            },
            board=board,
        )
        chain = built.chain(["local", "backup"])
        try:
            assert (await chain.complete(REQUEST)).text == "one"
            assert (await chain.complete(REQUEST)).text == "two"
        finally:
            await built.aclose()
        assert len(local.seen) == 1 and "authorization" not in local.seen[0].headers
    assert board.is_benched("local", "")


async def test_without_a_board_nothing_is_benched() -> None:
    with _servers(1) as (server,):
        server.add(Reply({}, status=429), openai_text("one"), Reply({}, status=429), openai_text("two"))
        built = providers.ProviderSet({"a": providers.build_provider("a", _entry(server, "k1", "k2"))})
        try:
            chain = built.chain(["a"])
            assert chain.board is None
            assert (await chain.complete(REQUEST)).text == "one"
            assert (await chain.complete(REQUEST)).text == "two"
        finally:
            await built.aclose()
        assert _keys(server) == ["k1", "k2", "k2", "k1"]


async def test_a_chain_whose_every_key_is_benched_says_when_one_frees() -> None:
    """``free_in`` is what a turn that found every key benched waits before its redelivery (CO-42)."""
    board = CooldownBoard(None, "a")
    with _servers(1) as (server,):
        server.add(Reply({}, status=429, headers={"Retry-After": "90"}))
        built = providers.ProviderSet({"a": providers.build_provider("a", _entry(server, "k1"))}, board=board)
        chain = built.chain(["a"])
        assert chain.free_in() is None  # nothing benched yet
        with pytest.raises(providers.LLMUnavailable):
            await chain.complete(REQUEST)
        left = chain.free_in()
        assert left is not None and 85 <= left <= 90
        with pytest.raises(providers.LLMUnavailable):  # not called again while benched
            await chain.complete(REQUEST)
        assert len(server.seen) == 1
        await built.aclose()
