"""Provider entries of a company and the fallback chain (CO-3, CO-12)."""

from __future__ import annotations

import pytest

from shared import providers
from shared.config import LlmProvider
from shared.providers import ChatRequest, UserMessage
from tests.support.llm_servers import OpenAIServer, Reply, openai_text, openai_tools
from tests.turns.helpers import EXAMPLES, api_trigger, engine, example_data, make_org, with_providers
from tests.turns.workspace import Estate

REQUEST = ChatRequest("sys", (UserMessage("hi"),))


def _entry(server: OpenAIServer, *keys: str) -> dict[str, object]:
    return {"type": "openai-compatible", "model": "m", "base_url": server.base_url, "api_keys": list(keys)}


async def test_primary_500_falls_back_to_backup_and_the_turn_names_it() -> None:
    # CO-3's check: llm [primary, backup]; primary answers 500, backup succeeds.
    with (
        OpenAIServer([Reply({"error": {"message": "boom"}}, status=500)] * 2) as primary,
        OpenAIServer() as backup,
    ):
        backup.add(
            openai_tools(("submit_work", {"outcome": "delivered", "summary": "answered the sender"})),
            openai_tools(("submit_review", {"decision": "done", "notes": "fine"})),  # the reviewer (CO-30)
        )
        org = make_org(
            with_providers(
                {"primary": _entry(primary, "p"), "backup": _entry(backup, "b")}, ["primary", "backup"]
            )
        )
        eng = engine(org)
        try:
            result = await eng.run("triage", api_trigger(), workspace=Estate().workspace("triage"))
        finally:
            await eng.providers.aclose()
        # the executor's call: primary's 500, then backup's answer (the reviewer's phase, CO-30,
        # resolves its own chain: not what this test is about)
        assert len(primary.seen) >= 1 and len(backup.seen) >= 1
    assert result.outcome == "delivered", result.error
    assert result.provider_keys[0] == "backup"
    assert result.phases[0].phase == "execute" and result.phases[0].provider_key == "backup"
    assert result.rounds[0].provider_key == "backup"


async def test_rate_limit_rotates_to_the_next_key_and_sticks() -> None:
    with OpenAIServer([Reply({}, status=429), openai_text("one"), openai_text("two")]) as server:
        chain = providers.ProviderSet({"a": providers.build_provider("a", _model(server, "k1", "k2"))}).chain(
            ["a"]
        )
        try:
            assert (await chain.complete(REQUEST)).text == "one"
            assert (await chain.complete(REQUEST)).text == "two"
        finally:
            await chain.members[0].aclose()
        keys = [s.headers["authorization"] for s in server.seen]
    assert keys == ["Bearer k1", "Bearer k2", "Bearer k2"]


async def test_auth_on_every_key_moves_to_the_next_entry() -> None:
    with (
        OpenAIServer([Reply({}, status=401), Reply({}, status=403)]) as first,
        OpenAIServer([openai_text("ok")]) as second,
    ):
        chain = providers.ProviderSet(
            {
                "a": providers.build_provider("a", _model(first, "k1", "k2")),
                "b": providers.build_provider("b", _model(second, "k3")),
            }
        ).chain(["a", "b"])
        try:
            done = await chain.complete(REQUEST)
        finally:
            for member in chain.members:
                await member.aclose()
        assert len(first.seen) == 2
    assert done.provider_key == "b"


async def test_fatal_stops_the_chain() -> None:
    with (
        OpenAIServer([Reply({"error": {"message": "bad request"}}, status=400)]) as first,
        OpenAIServer() as second,
    ):
        chain = providers.ProviderSet(
            {
                "a": providers.build_provider("a", _model(first, "k")),
                "b": providers.build_provider("b", _model(second, "k")),
            }
        ).chain(["a", "b"])
        try:
            with pytest.raises(providers.FatalLLMError):
                await chain.complete(REQUEST)
        finally:
            for member in chain.members:
                await member.aclose()
        assert second.seen == []


async def test_every_member_failing_retryably_fails_the_turn_llm_unavailable() -> None:
    with OpenAIServer([Reply(b"garbage")]) as first, OpenAIServer([Reply({}, status=503)]) as second:
        org = make_org(with_providers({"a": _entry(first, "k"), "b": _entry(second, "k")}, ["a", "b"]))
        eng = engine(org)
        try:
            result = await eng.run("triage", api_trigger(), workspace=Estate().workspace("triage"))
        finally:
            await eng.providers.aclose()
    assert result.outcome == "failed" and result.error_kind == "llm_unavailable"
    assert result.redeliver  # CO-11: nothing was delivered, the delivery is NAKed
    assert "server" in (result.error or "")


def _model(server: OpenAIServer, *keys: str) -> LlmProvider:
    return LlmProvider(type="openai-compatible", model="m", base_url=server.base_url, api_keys=list(keys))


def test_entries_without_a_usable_key_are_skipped() -> None:
    data = example_data()
    data["providers"]["llm"]["bare"] = {
        "type": "openai-compatible",
        "model": "q",
        "base_url": "http://127.0.0.1:1/v1",
    }
    data["providers"]["llm"]["vendor"] = {"type": "openai", "model": "gpt"}
    org = make_org(data)  # no ANTHROPIC_API_KEY / LOCAL_LLM_KEY / OPENAI_API_KEY
    built = providers.build_providers(org.company, env={}, base_dir=EXAMPLES)
    assert set(built.unconfigured) == {"claude", "local", "vendor"}
    assert set(built.providers) == {"default", "bare"}  # bare: keyless openai-compatible
    chain = built.chain(["claude", "bare"])
    assert chain.keys == ("claude", "bare") and [m.key for m in chain.members] == ["bare"]

    with_env = providers.build_providers(org.company, env={"OPENAI_API_KEY": "sk", "ANTHROPIC_API_KEY": "ak"})
    # claude lists ["${ANTHROPIC_API_KEY}"], which resolved to "" at apply: no fallback then.
    assert "vendor" in with_env.providers and "claude" in with_env.unconfigured
    assert "default" in with_env.unconfigured  # the offline script is relative to the company file


async def test_a_chain_with_no_usable_member_is_unavailable() -> None:
    chain = providers.ProviderSet({}, declared=["claude"]).chain(["claude"])
    with pytest.raises(providers.LLMUnavailable) as caught:
        await chain.complete(REQUEST)
    assert caught.value.chain == ("claude",) and caught.value.attempts == ()


def test_role_chain_resolution() -> None:
    org = make_org(example_data())
    built = providers.ProviderSet({}, declared=list(org.company.providers.llm))
    lead, dev = org.seat("lead"), org.seat("dev")
    assert lead is not None and dev is not None
    assert built.chain_keys(lead.role) == ("default",)  # llm: [default]
    assert built.chain_keys(dev.role) == ("default",)  # no llm: the entry keyed default
    assert providers.ProviderSet({}, declared=["x", "y"]).chain_keys(dev.role) == ("x",)  # else the first


def test_misconfigured_entries_say_why() -> None:
    with pytest.raises(providers.ProviderMisconfigured, match="base_url"):
        providers.build_provider("l", LlmProvider(type="openai-compatible", model="q"))
    with pytest.raises(providers.ProviderMisconfigured, match="script"):
        providers.build_provider("o", LlmProvider(type="offline", script="missing.yaml"))
