"""Providers seam: the LLM behind one interface (CO-12..CO-15, CO-3).

:class:`LlmProvider` is the contract (one ``complete`` call, never retried); the backends are
``openai``/``openai-compatible`` and ``anthropic`` over httpx, and ``offline`` (deterministic,
rule-driven, labelled ``[offline]``). :func:`build_providers` builds an applied company's
entries; :class:`ProviderChain` rotates keys and falls back in order, skipping keys the node's
:class:`CooldownBoard` has benched (CO-42, FL-121). :func:`build_embedder` builds ``providers.embeddings`` (AG-10): an
:class:`Embedder` over httpx or the local ``wordllama`` model.
"""

from ._anthropic import ANTHROPIC_BASE_URL, ANTHROPIC_VERSION, AnthropicProvider
from ._base import DEFAULT_MAX_OUTPUT_TOKENS, DEFAULT_TIMEOUT_SECONDS, LlmProvider
from ._chain import ProviderChain, ProviderSet, build_provider, build_providers
from ._cooldowns import COOLDOWN_CEILING, MIN_COOLDOWN, Bench, BenchKind, CooldownBoard, key_hint
from ._embeddings import (
    BatchRefused,
    Embedder,
    HttpEmbedder,
    LocalEmbedder,
    build_embedder,
    embedding_calls,
    hash_vector,
    normalise,
)
from ._errors import (
    MAX_RETRY_AFTER,
    AuthFailed,
    ContextTooLong,
    ErrorKind,
    FatalLLMError,
    LLMError,
    LLMUnavailable,
    MalformedResponse,
    ProviderError,
    ProviderMisconfigured,
    ProviderTimeout,
    RateLimited,
    ServerFailed,
)
from ._http import DEFAULT_MAX_CONCURRENT, HttpProvider, parse_retry_after
from ._offline import OFFLINE_LABEL, OfflineProvider
from ._openai import OPENAI_BASE_URL, OpenAICompatibleProvider, OpenAIProvider
from ._types import (
    AssistantMessage,
    ChatRequest,
    Completion,
    Message,
    RequestContext,
    StopReason,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)

__all__ = [
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
    "COOLDOWN_CEILING",
    "DEFAULT_MAX_CONCURRENT",
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_RETRY_AFTER",
    "MIN_COOLDOWN",
    "OFFLINE_LABEL",
    "OPENAI_BASE_URL",
    "AnthropicProvider",
    "AssistantMessage",
    "AuthFailed",
    "Bench",
    "BenchKind",
    "ChatRequest",
    "Completion",
    "ContextTooLong",
    "CooldownBoard",
    "ErrorKind",
    "FatalLLMError",
    "HttpProvider",
    "LLMError",
    "LLMUnavailable",
    "LlmProvider",
    "MalformedResponse",
    "Message",
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
