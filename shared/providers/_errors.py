"""Errors of the providers seam (CO-12).

A provider call fails in one of the five classes CO-12 names (``kind``), and each class says
whether trying again is safe and what the chain does next::

    CrewletError
    └── ProviderError                       (shared.providers) the seam's base
        ├── LLMError(kind)                  a call failed; also a ServiceError
        │   ├── RateLimited                 rate_limit: 429/402; rotate the key, then fall back
        │   ├── AuthFailed                  auth: 401/403; rotate the key, then fall back
        │   ├── ProviderTimeout             timeout: no answer in time / 408; also TimeoutError
        │   ├── ServerFailed                server: 5xx, 529, connection refused or reset
        │   │   └── MalformedResponse       server: 200 but not the shape the API documents
        │   └── FatalLLMError               fatal: other 4xx; the chain stops here
        │       └── ContextTooLong          fatal: the prompt does not fit the model's window
        ├── LLMUnavailable                  every chain member failed retryably, or none is usable
        └── ProviderMisconfigured           an entry cannot be built (also a UsageError)

A provider never retries (CO-12): rotation and fallback belong to
:class:`~shared.providers.ProviderChain`. ``retryable`` is True for every class the chain moves
past (an LLM call has no side effects, so a repeat is always *safe*; it may not *succeed* with
the same key, which is why the chain rotates keys on ``rate_limit``/``auth``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from shared.errors import CrewletError, ServiceError, UsageError

__all__ = [
    "MAX_RETRY_AFTER",
    "AuthFailed",
    "ContextTooLong",
    "ErrorKind",
    "FatalLLMError",
    "LLMError",
    "LLMUnavailable",
    "MalformedResponse",
    "ProviderError",
    "ProviderMisconfigured",
    "ProviderTimeout",
    "RateLimited",
    "ServerFailed",
]

ErrorKind = Literal["rate_limit", "auth", "timeout", "server", "fatal"]
"""CO-12's closed set of provider failure classes (orig)."""

MAX_RETRY_AFTER = 300.0
"""The longest server ``Retry-After`` a turn's redelivery honours, in seconds (ours): a 503/529
saying "come back in an hour" parks the delivery for five minutes at most, after which the
provider is asked again (a rate-limit bench has its own bounds, CO-42). The raw value stays on
:attr:`LLMError.retry_after`."""


class ProviderError(CrewletError):
    """Base of every error the providers seam raises."""


class LLMError(ProviderError, ServiceError):
    """One provider call failed (CO-12).

    Attributes:
        kind: The failure class; the chain acts on it.
        provider_key: The ``providers.llm`` key of the entry that failed.
        status: The HTTP status, or None when no response came (timeout, connection) or the
            provider makes no HTTP call.
        retry_after: Seconds the server asked to wait (``Retry-After``), or None when it did
            not say.
    """

    kind: ErrorKind = "server"
    retryable = True

    def __init__(
        self,
        message: str,
        *,
        provider_key: str = "",
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.provider_key = provider_key
        self.status = status
        self.retry_after = retry_after


class RateLimited(LLMError):
    """HTTP 429 or 402: the key is over its quota. The chain rotates to the entry's next key."""

    kind: ErrorKind = "rate_limit"


class AuthFailed(LLMError):
    """HTTP 401 or 403: the key was refused. The chain rotates to the entry's next key."""

    kind: ErrorKind = "auth"


class ProviderTimeout(LLMError, TimeoutError):
    """No answer within ``timeout_seconds`` (or HTTP 408). The call may have been billed."""

    kind: ErrorKind = "timeout"


class ServerFailed(LLMError):
    """HTTP 5xx or 529, or the connection was refused or broke. The chain falls back."""

    kind: ErrorKind = "server"


class MalformedResponse(ServerFailed):
    """The server answered 2xx with a body that is not the documented shape (garbage, HTML,
    a JSON object without ``choices``/``content``).

    Classed as ``server`` rather than ``fatal`` (ours; CO-12 is silent): the fault is on the far
    side, so another entry of the chain may well answer.
    """


class FatalLLMError(LLMError):
    """Any other 4xx: the request itself is wrong for this provider. The chain stops (CO-12)."""

    kind: ErrorKind = "fatal"
    retryable = False


class ContextTooLong(FatalLLMError):
    """The prompt does not fit the model's context window (a 400 saying so). The turn fails
    with ``error_kind: context_exceeded`` (CO-16)."""


class LLMUnavailable(ProviderError, ServiceError):
    """Every member of a seat's chain failed retryably, or the chain has no usable member
    (CO-3). The turn publishes ``llm_unavailable{chain, last_error}``; the delivery is NAKed.

    Attributes:
        chain: The chain's provider keys, in order (usable or not).
        attempts: ``(provider_key, error)`` for each call tried, in order; empty when no member
            was usable.
    """

    retryable = True

    def __init__(self, chain: Sequence[str], attempts: Sequence[tuple[str, LLMError]]) -> None:
        self.chain = tuple(chain)
        self.attempts = tuple(attempts)
        if attempts:
            key, last = attempts[-1]
            detail = f"last error from {key!r}: {last.kind}: {last}"
        else:
            detail = "no member of the chain has a usable key"
        super().__init__(f"every provider of chain {list(self.chain)} failed; {detail}")

    @property
    def last_error(self) -> LLMError | None:
        """The last call's error, or None when nothing was tried."""
        return self.attempts[-1][1] if self.attempts else None

    @property
    def retry_after(self) -> float | None:
        """Seconds the servers asked to wait: the largest ``Retry-After`` among the attempts a
        server answered (429, 503, Anthropic's 529 ``overloaded_error`` ...), capped at
        :data:`MAX_RETRY_AFTER`; None when none said (the caller then backs off on its own,
        CO-7). A member skipped for a bench is not counted here: how long a bench lasts is
        :meth:`ProviderChain.free_in <shared.providers.ProviderChain.free_in>`'s answer.

        .. versionadded:: 0.1 (issue 14)
        """
        said = [e.retry_after for _, e in self.attempts if e.retry_after is not None and e.status is not None]
        return min(max(said), MAX_RETRY_AFTER) if said else None


class ProviderMisconfigured(ProviderError, UsageError):
    """A provider entry cannot be built: an unknown type, an offline entry whose script is
    missing or invalid, an ``openai-compatible`` entry without ``base_url``."""

    retryable = False
