"""Pin the public API of ``shared.providers`` (STYLE: a test pins ``__all__``)."""

from __future__ import annotations

from shared import providers

EXPECTED = sorted(
    [
        "BatchRefused",
        "Embedder",
        "HttpEmbedder",
        "LocalEmbedder",
        "build_embedder",
        "embedding_calls",
        "hash_vector",
        "normalise",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_VERSION",
        "AnthropicProvider",
        "AssistantMessage",
        "AuthFailed",
        "Bench",
        "BenchKind",
        "COOLDOWN_CEILING",
        "ChatRequest",
        "Completion",
        "ContextTooLong",
        "CooldownBoard",
        "DEFAULT_MAX_CONCURRENT",
        "DEFAULT_MAX_OUTPUT_TOKENS",
        "DEFAULT_TIMEOUT_SECONDS",
        "ErrorKind",
        "FatalLLMError",
        "HttpProvider",
        "LLMError",
        "LLMUnavailable",
        "LlmProvider",
        "MAX_RETRY_AFTER",
        "MIN_COOLDOWN",
        "MalformedResponse",
        "Message",
        "OFFLINE_LABEL",
        "OPENAI_BASE_URL",
        "OfflineProvider",
        "OpenAICompatibleProvider",
        "OpenAIProvider",
        "ProviderChain",
        "ProviderError",
        "ProviderMisconfigured",
        "ProviderSet",
        "ProviderTimeout",
        "RateLimited",
        "RequestContext",
        "ServerFailed",
        "StopReason",
        "ToolCall",
        "ToolResultMessage",
        "ToolSpec",
        "UserMessage",
        "build_provider",
        "build_providers",
        "key_hint",
        "parse_retry_after",
    ]
)


def test_all_is_pinned_and_every_name_resolves() -> None:
    assert sorted(providers.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(providers, name) is not None
