"""The provider contract (CO-12): one abstract class, one module per backend.

A provider is one ``providers.llm.<key>`` entry. It holds the entry's settings and its API keys;
:meth:`LlmProvider.complete` makes exactly one call with the current key and never retries.
Which key is current is the chain's business (:meth:`LlmProvider.rotate_key`, CO-3).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from ._types import ChatRequest, Completion

__all__ = ["DEFAULT_MAX_OUTPUT_TOKENS", "DEFAULT_TIMEOUT_SECONDS", "LlmProvider"]

DEFAULT_TIMEOUT_SECONDS = 120.0
"""Per-call timeout, in seconds (CO-12, orig)."""
DEFAULT_MAX_OUTPUT_TOKENS = 4096
"""Answer cap, in tokens (CO-12, ours)."""


class LlmProvider(ABC):
    """One LLM provider entry (CO-12).

    Subclasses set :attr:`type` and implement :meth:`complete`.

    Attributes:
        type: The entry type this backend serves (``openai``, ``anthropic``, ...).
        key: The ``providers.llm`` key.
        model: The configured model id.
        max_output_tokens: Default answer cap, in tokens.
        temperature: Sent only when not None.
        timeout_seconds: Per-call timeout, in seconds.
    """

    type: ClassVar[str] = ""

    def __init__(
        self,
        key: str,
        *,
        model: str,
        api_keys: Sequence[str] = (),
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        temperature: float | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        self.key = key
        self.model = model
        self.max_output_tokens = max_output_tokens
        self.temperature = temperature
        self.timeout_seconds = timeout_seconds
        self._api_keys = tuple(api_keys)
        self._current = 0

    @property
    def key_count(self) -> int:
        """How many API keys the entry rotates over (0 for a keyless entry)."""
        return len(self._api_keys)

    @property
    def key_index(self) -> int:
        """The index of the key the next call uses (stable until :meth:`rotate_key`)."""
        return self._current

    @property
    def api_key(self) -> str:
        """The key the next call uses; "" for a keyless entry. Never log it."""
        return self._api_keys[self._current] if self._api_keys else ""

    def rotate_key(self) -> bool:
        """Make the next key current (CO-3: keys rotate on ``rate_limit``/``auth``).

        The choice sticks: later calls start from the new key.

        Returns:
            True when another key became current; False when the entry has fewer than two keys.
        """
        if len(self._api_keys) < 2:
            return False
        self._current = (self._current + 1) % len(self._api_keys)
        return True

    @abstractmethod
    async def complete(self, request: ChatRequest) -> Completion:
        """Make one call and return the answer.

        Args:
            request: The system prompt, the conversation, the tool surface and the limits.

        Returns:
            The answer with its token usage; ``provider_key`` is :attr:`key`.

        Raises:
            RateLimited: 429/402.
            AuthFailed: 401/403.
            ProviderTimeout: No answer within :attr:`timeout_seconds`, or 408.
            ServerFailed: 5xx/529 or a broken connection (:class:`MalformedResponse` for a
                2xx whose body is not the documented shape).
            FatalLLMError: Any other 4xx (:class:`ContextTooLong` when the prompt is too long).
        """

    async def aclose(self) -> None:  # noqa: B027 - a no-op default is the point
        """Release the entry's connections; a no-op for providers that hold none."""
