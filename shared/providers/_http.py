"""What the two HTTP backends share: reused httpx pools per entry, and the translation of
httpx outcomes into the CO-12 failure classes (httpx errors never leave this seam).

HTTP mapping (CO-12, ours following the orig classes): 429/402 → ``rate_limit``; 401/403 →
``auth``; a request timeout or 408 → ``timeout``; 500–599 and 529 → ``server``; other 4xx →
``fatal``. A 2xx that is not JSON → :class:`MalformedResponse`. Every error status keeps the
server's ``Retry-After`` (delta-seconds or an HTTP date, :func:`parse_retry_after`) on the error,
whatever the class: a 429, and also a 503 or Anthropic's 529 ``overloaded_error`` (``server``,
never benched), so the turn's redelivery waits as long as the server asked (issue 14).

Concurrency (ours, issue 14): at most ``max_concurrent`` calls (default
:data:`DEFAULT_MAX_CONCURRENT`, 8) are in flight at once per API key of an entry in this process;
a further call waits for a free slot before it is sent (the wait is not part of
``timeout_seconds``). The entry's connections (``max_concurrent`` × keys of them at most) live in
httpx pools of :data:`SHARD_CONNECTIONS`, every one kept alive between calls (issue 16: httpx's
default pool kept 20 alive, so calls beyond the 20th dialled a new connection each time). The bound lives on the entry object, which an apply rebuilds: for the moment
two applies overlap, the old and the new generation each have their own slots.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from shared.config import Cooldowns

from ._base import DEFAULT_MAX_OUTPUT_TOKENS, DEFAULT_TIMEOUT_SECONDS, LlmProvider
from ._errors import (
    AuthFailed,
    ContextTooLong,
    FatalLLMError,
    LLMError,
    MalformedResponse,
    ProviderTimeout,
    RateLimited,
    ServerFailed,
)

__all__ = ["DEFAULT_MAX_CONCURRENT", "HttpProvider", "loads_arguments", "parse_retry_after", "token_count"]

DEFAULT_MAX_CONCURRENT = 8
"""Calls in flight at once per API key of an entry, in one process (ours, issue 14); an entry's
``max_concurrent`` overrides it."""

SHARD_CONNECTIONS = 8
"""Connections of one of an entry's httpx pools (issue 16). httpcore scans every connection of a pool
(``has_expired``, ``is_idle``) on each request and each answer: one pool of 32 connections cost ~10 %
of a node's CPU at 32 turns in flight, growing with the square of the calls in flight. Pools of 8,
filled first-fit, keep that scan short."""


class _Shard:
    """One httpx pool of an entry and the calls it carries now."""

    __slots__ = ("busy", "client")

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.busy = 0


_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "prompt is too long",
    "maximum context",
    "too many tokens",
)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Parse a ``Retry-After`` header: delta-seconds or an HTTP date.

    Args:
        value: The header value, or None when absent.
        now: The current Unix time in seconds, for the date form; None for the wall clock.

    Returns:
        Seconds to wait (≥ 0), or None when absent or unparsable.
    """
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _error_text(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body[:300].decode("utf-8", "replace").strip()
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            parts = [str(err.get(k)) for k in ("type", "code", "message") if err.get(k)]
            return ": ".join(parts)
        if isinstance(err, str):
            return err
        if isinstance(data.get("message"), str):
            return str(data["message"])
    return json.dumps(data)[:300]


class HttpProvider(LlmProvider):
    """Base of the httpx backends: :class:`httpx.AsyncClient` pools of :data:`SHARD_CONNECTIONS`
    connections per entry, reused by every call and every key (infra-facts T2: building a client
    costs ~17 ms; the pools share one TLS context, so a further pool costs ~1 ms).

    Args:
        key: The ``providers.llm`` key.
        model: The configured model id.
        base_url: The API base (no trailing slash needed).
        api_keys: The keys to rotate over; empty for a keyless entry.
        max_output_tokens: Default answer cap, in tokens.
        temperature: Sent only when not None.
        timeout_seconds: Per-call timeout, in seconds.
        cooldowns: How long a benched key rests (CO-42); None for the defaults.
        max_concurrent: Calls in flight at once per API key, in this process (>= 1).

    Raises:
        ValueError: ``max_concurrent`` < 1.

    .. versionchanged:: 0.1 ``max_concurrent`` (issue 14).
    """

    def __init__(
        self,
        key: str,
        *,
        model: str,
        base_url: str,
        api_keys: Sequence[str] = (),
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        temperature: float | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        cooldowns: Cooldowns | None = None,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT,
    ) -> None:
        super().__init__(
            key,
            model=model,
            api_keys=api_keys,
            max_output_tokens=max_output_tokens,
            temperature=temperature,
            timeout_seconds=timeout_seconds,
            cooldowns=cooldowns,
        )
        if max_concurrent < 1:
            raise ValueError(f"providers.llm.{key}.max_concurrent: {max_concurrent} must be >= 1")
        self.base_url = base_url.rstrip("/")
        self.max_concurrent = max_concurrent
        self._shards: list[_Shard] = []  # the entry's connection pools, filled first-fit
        self._tls: Any = None  # one TLS context for every shard (building one costs ~20 ms)
        self._gates: dict[int, asyncio.Semaphore] = {}  # key index -> its call slots

    def _gate(self) -> asyncio.Semaphore:
        """The call slots of the current API key (made on first use, in the running loop)."""
        gate = self._gates.get(self.key_index)
        if gate is None:
            gate = self._gates[self.key_index] = asyncio.Semaphore(self.max_concurrent)
        return gate

    def _shard(self) -> _Shard:
        """The first connection pool with room for one more call; a new one when all are full.

        The gates bound the calls in flight to ``max_concurrent`` × keys, so there are at most that
        many / :data:`SHARD_CONNECTIONS` pools, each keeping all its connections alive.
        """
        for shard in self._shards:
            if shard.busy < SHARD_CONNECTIONS:
                return shard
        if self._tls is None:
            self._tls = httpx.create_ssl_context()
        shard = _Shard(
            httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_seconds),
                verify=self._tls,
                limits=httpx.Limits(
                    max_connections=SHARD_CONNECTIONS, max_keepalive_connections=SHARD_CONNECTIONS
                ),
            )
        )
        self._shards.append(shard)
        return shard

    async def aclose(self) -> None:
        """Close the entry's connection pools."""
        shards, self._shards = self._shards, []
        for shard in shards:
            await shard.client.aclose()

    async def _post_json(self, url: str, headers: Mapping[str, str], body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` as JSON and return the decoded 2xx object.

        Raises:
            LLMError: The subclass for the outcome (see the module docstring).
        """
        try:
            async with self._gate():
                shard = self._shard()
                shard.busy += 1
                try:
                    response = await shard.client.post(url, headers=dict(headers), json=body)
                finally:
                    shard.busy -= 1
        except httpx.TimeoutException as e:
            raise ProviderTimeout(
                f"{self.key}: no answer within {self.timeout_seconds:g} s ({type(e).__name__})",
                provider_key=self.key,
            ) from None
        except httpx.HTTPError as e:
            raise ServerFailed(f"{self.key}: {type(e).__name__}: {e}", provider_key=self.key) from None
        if response.status_code >= 300:
            raise self._status_error(response)
        try:
            data = json.loads(response.content)
        except ValueError:
            raise MalformedResponse(
                f"{self.key}: HTTP {response.status_code} body is not JSON: {response.content[:120]!r}",
                provider_key=self.key,
                status=response.status_code,
            ) from None
        if not isinstance(data, dict):
            raise MalformedResponse(
                f"{self.key}: HTTP {response.status_code} body is not a JSON object",
                provider_key=self.key,
                status=response.status_code,
            )
        return data

    def _status_error(self, response: httpx.Response) -> LLMError:
        status = response.status_code
        text = _error_text(response.content)
        message = f"{self.key}: HTTP {status}" + (f": {text}" if text else "")
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        cls: type[LLMError]
        if status in (429, 402):
            cls = RateLimited
        elif status in (401, 403):
            cls = AuthFailed
        elif status == 408:
            cls = ProviderTimeout
        elif status >= 500:
            cls = ServerFailed
        elif any(m in text.lower() for m in _CONTEXT_MARKERS):
            cls = ContextTooLong
        else:
            cls = FatalLLMError
        return cls(message, provider_key=self.key, status=status, retry_after=retry_after)

    def _malformed(self, what: str) -> MalformedResponse:
        return MalformedResponse(f"{self.key}: answer {what}", provider_key=self.key, status=200)


def loads_arguments(text: Any) -> tuple[dict[str, Any] | None, str | None]:
    """Parse a tool call's argument text: ``(object, None)`` or ``(None, raw text)`` (CO-12:
    unparsable arguments yield ``raw_arguments`` rather than an exception)."""
    if isinstance(text, dict):
        return text, None
    if not isinstance(text, str):
        return None, json.dumps(text)
    if not text.strip():
        return {}, None
    try:
        value = json.loads(text)
    except ValueError:
        return None, text
    return (value, None) if isinstance(value, dict) else (None, text)


def token_count(value: Any) -> int:
    """Return a usage figure as a non-negative int; anything else (absent, null, junk) is 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
