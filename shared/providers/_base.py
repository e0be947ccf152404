"""The provider contract (CO-12): one abstract class, one module per backend.

A provider is one ``providers.llm.<key>`` entry. It holds the entry's settings and its API keys;
:meth:`LlmProvider.complete` makes exactly one call with the current key and never retries.
Which key is current is the chain's business (:meth:`LlmProvider.rotate_key`, CO-3), and so is
skipping a benched key (CO-42, :class:`~shared.providers.CooldownBoard`).

:meth:`LlmProvider.estimate` is what a round may cost at most, in tokens, before it runs (the
budget reservation of CO-37/FL-119): ``ceil(utf8 bytes(prompt text) / 3)`` plus the answer cap,
where the prompt text is :func:`prompt_text`. English prose and JSON run near four bytes a token
on the vendors' tokenizers, so three errs high and the settle after the round gives the
difference back; it is an estimate, not a bound (text dense in rare tokens can cost more).
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from shared.config import Cooldowns

from ._types import ChatRequest, Completion, plain

__all__ = ["DEFAULT_MAX_OUTPUT_TOKENS", "DEFAULT_TIMEOUT_SECONDS", "LlmProvider", "prompt_text"]

DEFAULT_TIMEOUT_SECONDS = 120.0
"""Per-call timeout, in seconds (CO-12, orig)."""
DEFAULT_MAX_OUTPUT_TOKENS = 4096
"""Answer cap, in tokens (CO-12, ours)."""
_ESTIMATE_BYTES_PER_TOKEN = 3


def prompt_text(request: ChatRequest) -> str:
    """The text a request's prompt is measured by: the system prompt, then the messages and the
    tools as one JSON array (dataclass fields, sorted keys, UTF-8 kept as is).

    The offline provider counts ``input_tokens`` on it (CO-15) and :meth:`LlmProvider.estimate`
    sizes a round by it.
    """
    return request.system + json.dumps(
        [plain(m) for m in request.messages] + [plain(t) for t in request.tools],
        ensure_ascii=False,
        sort_keys=True,
    )


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
        cooldowns: How long a benched key rests (CO-42); the chain hands it to the board.
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
        cooldowns: Cooldowns | None = None,
    ) -> None:
        self.key = key
        self.model = model
        self.max_output_tokens = max_output_tokens
        self.temperature = temperature
        self.timeout_seconds = timeout_seconds
        self.cooldowns = cooldowns or Cooldowns()
        self._api_keys = tuple(api_keys)
        self._current = 0

    @property
    def key_count(self) -> int:
        """How many API keys the entry rotates over (0 for a keyless entry)."""
        return len(self._api_keys)

    @property
    def api_keys(self) -> tuple[str, ...]:
        """Every key the entry rotates over, in order; empty for a keyless entry. Never log them."""
        return self._api_keys

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

    def output_cap(self, request: ChatRequest) -> int:
        """The answer cap of ``request`` on this entry, in tokens (the request's, else the entry's)."""
        return request.max_output_tokens or self.max_output_tokens

    def estimate(self, request: ChatRequest) -> int:
        """The most tokens ``request`` may cost on this entry, input plus output (CO-37, FL-119).

        The default (HTTP backends): ``ceil(utf8 bytes(prompt_text(request)) / 3)`` plus
        :meth:`output_cap`. No call is made and nothing changes.

        Args:
            request: The round about to run.

        Returns:
            Tokens, ≥ the answer cap.
        """
        size = len(prompt_text(request).encode("utf-8"))
        return math.ceil(size / _ESTIMATE_BYTES_PER_TOKEN) + self.output_cap(request)

    async def aclose(self) -> None:  # noqa: B027 - a no-op default is the point
        """Release the entry's connections; a no-op for providers that hold none."""
