"""Provider entries of an applied company, and a seat's fallback chain (CO-3, CO-12).

:func:`build_providers` turns ``providers.llm`` (secrets already resolved, CO-5) into a
:class:`ProviderSet`, once per apply. An entry with no usable key is not an error: it is
logged once as ``provider_unconfigured{key}`` and skipped inside every chain (CO-3). A seat's
chain is its role's ``llm`` (a key or a list), else the entry keyed ``default``, else the
first entry.

:meth:`ProviderChain.complete` is where retrying lives (a provider never retries, CO-12): on
``rate_limit``/``auth`` the entry's next key is tried (each key once per call); then, on any
retryable failure, the next entry; a ``fatal`` error stops the chain at once. When every
member failed retryably, or none is usable, it raises :class:`LLMUnavailable`.

Credential cooldowns (CO-42, FL-121): the node's :class:`~shared.providers.CooldownBoard` is
created once per node and outlives applies, while a :class:`ProviderSet` is built per apply; so
the board is handed in where the set is built (``build_providers(..., board=)`` or
``ProviderSet(..., board=)``) and every chain of that set consults it: a benched key is not
called, an entry whose every key is benched is skipped (the chain falls back to the next), and a
``rate_limit``/``auth`` failure benches the key that failed. A set built without a board never
benches (every key is called, as before cooldowns existed).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shared import config, logs

from ._anthropic import ANTHROPIC_BASE_URL, AnthropicProvider
from ._base import LlmProvider
from ._cooldowns import CooldownBoard
from ._errors import (
    AuthFailed,
    FatalLLMError,
    LLMError,
    LLMUnavailable,
    ProviderMisconfigured,
    RateLimited,
)
from ._offline import OfflineProvider
from ._openai import OPENAI_BASE_URL, OpenAICompatibleProvider, OpenAIProvider
from ._types import ChatRequest, Completion

__all__ = ["ProviderChain", "ProviderSet", "build_provider", "build_providers"]

_log = logs.get("providers")
_UNRESOLVED = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")
_ENV_FALLBACK = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


class ProviderChain:
    """A seat's providers in fallback order (CO-3), skipping benched keys (CO-42).

    Args:
        keys: The chain as configured, usable or not (named in :class:`LLMUnavailable`).
        members: The usable providers, in chain order.
        board: The node's credential cooldowns; None to call every key (no benching).
    """

    def __init__(
        self, keys: Sequence[str], members: Sequence[LlmProvider], *, board: CooldownBoard | None = None
    ) -> None:
        self.keys = tuple(keys)
        self.members = tuple(members)
        self.board = board
        self._asked_until: float | None = None  # monotonic end of the servers' last Retry-After

    def provider(self, key: str) -> LlmProvider | None:
        """Return the usable member with ``key``, or None."""
        return next((m for m in self.members if m.key == key), None)

    def _pick(self, provider: LlmProvider, tried: set[int]) -> bool:
        """Make the first untried, unbenched key of ``provider`` current, counting on from the
        current one; False when there is none (the current key then stays as it was).

        Rotation sticks (CO-3), so a benched key is passed over once and later calls start from
        the key that is free.
        """
        count = max(provider.key_count, 1)
        keys = provider.api_keys or ("",)
        start = provider.key_index
        for step in range(count):
            index = (start + step) % count
            if index in tried or (
                self.board is not None and self.board.is_benched(provider.key, keys[index])
            ):
                continue
            for _ in range(step):
                provider.rotate_key()
            if step:
                _log.info("llm_key_rotated", provider_key=provider.key, key_index=provider.key_index)
            return True
        return False

    def _benched(self, provider: LlmProvider) -> LLMError:
        """The attempt recorded for an entry skipped because its every key is benched."""
        assert self.board is not None
        benches = [self.board.bench_of(provider.key, k) for k in provider.api_keys or ("",)]
        live = [b for b in benches if b is not None]
        first = min(live, key=lambda b: b.until) if live else None
        cls = AuthFailed if first is not None and first.kind == "auth" else RateLimited
        left = (first.until - self.board.now()).total_seconds() if first is not None else None
        until = f" until {first.until.isoformat(timespec='seconds')}" if first is not None else ""
        _log.info("llm_entry_benched", provider_key=provider.key, keys=len(benches))
        return cls(
            f"{provider.key}: every key is cooling down{until}; not called",
            provider_key=provider.key,
            retry_after=max(left, 0.0) if left is not None else None,
        )

    def free_in(self) -> float | None:
        """Seconds before calling the chain again can succeed; None when nothing says to wait.

        The larger of two waits: until some member has a key that is not benched (CO-42; None
        when one is free now, or without a board), and what is left of the servers'
        ``Retry-After`` on the chain's last :class:`LLMUnavailable` (its
        :attr:`~LLMUnavailable.retry_after`: 429, 503, Anthropic's 529, capped at
        :data:`~shared.providers.MAX_RETRY_AFTER`). A turn whose chain failed is redelivered
        no sooner than this (issue 14: a provider's ``Retry-After`` is listened to).

        .. versionchanged:: 0.1 Also the servers' ``Retry-After`` (issue 14); was benches only.
        """
        asked = None
        if self._asked_until is not None:
            left = self._asked_until - time.monotonic()
            asked = left if left > 0 else None
        benched = self._bench_wait()
        if benched is None or asked is None:
            return benched if asked is None else asked
        return max(benched, asked)

    def _bench_wait(self) -> float | None:
        """Seconds until some member has a key that is not benched; None when one is free now."""
        if self.board is None or not self.members:
            return None
        now = self.board.now()
        waits: list[float] = []
        for provider in self.members:
            for key in provider.api_keys or ("",):
                bench = self.board.bench_of(provider.key, key)
                if bench is None:
                    return None
                waits.append(max(0.0, (bench.until - now).total_seconds()))
        return min(waits) if waits else None

    def estimate(self, request: ChatRequest) -> int:
        """The most tokens ``request`` may cost (CO-37, FL-119): the estimate of the first
        member that has a key free now (:meth:`LlmProvider.estimate`), else of the first member.

        Args:
            request: The round about to run.

        Returns:
            Tokens; 0 when the chain has no usable member (its call fails without cost).
        """
        for provider in self.members:
            if self.board is None or any(
                not self.board.is_benched(provider.key, k) for k in provider.api_keys or ("",)
            ):
                return provider.estimate(request)
        return self.members[0].estimate(request) if self.members else 0

    async def complete(self, request: ChatRequest) -> Completion:
        """Ask each member in order until one answers (CO-3, CO-12, CO-42).

        Within a member, a key the board has benched is not called; a ``rate_limit``/``auth``
        failure benches the key (:meth:`CooldownBoard.bench`, which also publishes it to every
        node) and moves to the member's next key; each key is tried at most once per call. A
        member whose every key is benched is skipped without a call.

        Args:
            request: The call; each member fills its own model and defaults.

        Returns:
            The first answer; its ``provider_key`` names the member that served.

        Raises:
            FatalLLMError: A member refused the request itself (the chain stops there).
            LLMUnavailable: Every member failed retryably or was benched, or no member is
                usable. Its ``attempts`` hold each call's error and, for a member skipped whole,
                a :class:`RateLimited` (or :class:`AuthFailed`) with no status whose
                ``retry_after`` is the seconds until its first key is free.
        """
        attempts: list[tuple[str, LLMError]] = []
        for provider in self.members:
            tried: set[int] = set()
            while True:
                if not self._pick(provider, tried):
                    if not tried and self.board is not None:
                        attempts.append((provider.key, self._benched(provider)))
                    break
                tried.add(provider.key_index)
                api_key = provider.api_key
                try:
                    answer = await provider.complete(request)
                except FatalLLMError:
                    raise
                except LLMError as e:
                    attempts.append((provider.key, e))
                    _log.warning(
                        "llm_call_failed",
                        provider_key=provider.key,
                        kind=e.kind,
                        status=e.status,
                        error=str(e),
                    )
                    if e.kind not in ("rate_limit", "auth"):
                        break
                    if self.board is not None:
                        await self.board.bench(
                            provider.key,
                            api_key,
                            "auth" if e.kind == "auth" else "rate_limit",
                            retry_after=e.retry_after,
                            cooldowns=provider.cooldowns,
                        )
                    continue
                if self.board is not None:
                    self.board.cleared(provider.key, api_key)
                self._asked_until = None
                return answer
        unavailable = LLMUnavailable(self.keys, attempts)
        asked = unavailable.retry_after
        self._asked_until = time.monotonic() + asked if asked is not None else None
        raise unavailable


class ProviderSet:
    """Every ``providers.llm`` entry of one applied company (CO-3).

    Args:
        providers: The usable entries by key, in document order.
        declared: Every key of the document in order (usable or not); None for the keys of
            ``providers``.
        unconfigured: The keys skipped for having no usable key, with why.
        board: The node's credential cooldowns, consulted by every chain of the set (CO-42);
            None for no benching.
    """

    def __init__(
        self,
        providers: Mapping[str, LlmProvider],
        *,
        declared: Sequence[str] | None = None,
        unconfigured: Mapping[str, str] | None = None,
        board: CooldownBoard | None = None,
    ) -> None:
        self.providers = dict(providers)
        self.declared = tuple(declared if declared is not None else self.providers)
        self.unconfigured = dict(unconfigured or {})
        self.board = board

    def chain(self, keys: Sequence[str]) -> ProviderChain:
        """Return the chain over ``keys``, skipping the unusable ones (CO-3), with the set's board."""
        return ProviderChain(keys, [self.providers[k] for k in keys if k in self.providers], board=self.board)

    def chain_keys(self, role: config.CompanyRole | None) -> tuple[str, ...]:
        """Return the keys a role's executor uses: its ``llm`` (a key, a list, or the
        ``default`` of a per-phase mapping), else ``default``, else the first entry (CO-3)."""
        selected: Any = role.llm if role is not None else None
        if isinstance(selected, config.LlmPhases):
            selected = selected.default
        if isinstance(selected, str):
            return (selected,)
        if isinstance(selected, list) and selected:
            return tuple(selected)
        if "default" in self.declared:
            return ("default",)
        return self.declared[:1]

    def chain_for(self, role: config.CompanyRole | None) -> ProviderChain:
        """Return the executor chain of ``role`` (see :meth:`chain_keys`)."""
        return self.chain(self.chain_keys(role))

    async def aclose(self) -> None:
        """Close every entry's connections (call when the apply that built this set retires)."""
        for provider in self.providers.values():
            await provider.aclose()


def _usable_keys(key: str, entry: config.LlmProvider, env: Mapping[str, str]) -> list[str] | None:
    """The keys to rotate over; [] for a keyless entry; None when the entry has no usable key."""
    keys = [k for k in entry.api_keys if k and not _UNRESOLVED.search(k)]
    if keys:
        return keys
    if entry.api_keys:  # every listed key resolved to nothing (e.g. an unset ${VAR})
        return None
    fallback = _ENV_FALLBACK.get(entry.type)
    if fallback is None:  # openai-compatible with no keys listed: a keyless local server
        return []
    value = env.get(fallback, "")
    return [value] if value else None


def build_provider(
    key: str, entry: config.LlmProvider, *, base_dir: str | Path = ".", env: Mapping[str, str] | None = None
) -> LlmProvider:
    """Build one provider entry (CO-3, CO-13..CO-15).

    Args:
        key: The ``providers.llm`` key.
        entry: The entry, secrets resolved (CO-5).
        base_dir: The company file's directory; an offline ``script`` is relative to it.
        env: Where ``ANTHROPIC_API_KEY``/``OPENAI_API_KEY`` are read for an entry with an empty
            ``api_keys``; None for ``os.environ``.

    Returns:
        The provider, not yet connected (httpx clients open on first use).

    Raises:
        ProviderMisconfigured: The entry has no usable key, lacks a required field, or its
            offline script cannot be loaded; the message says which.
    """
    env = os.environ if env is None else env
    settings: dict[str, Any] = {
        "max_output_tokens": entry.max_output_tokens,
        "temperature": entry.temperature,
        "timeout_seconds": entry.timeout_seconds,
        "cooldowns": entry.cooldowns,
    }
    if entry.type == "offline":
        if not entry.script:
            raise ProviderMisconfigured(f"providers.llm.{key}: an offline entry needs a script")
        try:
            script = config.load_offline_script(Path(base_dir) / entry.script)
        except config.ConfigInvalid as e:
            raise ProviderMisconfigured(f"providers.llm.{key}.script: {e}") from None
        return OfflineProvider(key, script=script, **settings)
    keys = _usable_keys(key, entry, env)
    if keys is None:
        raise ProviderMisconfigured(f"providers.llm.{key}: no usable API key")
    if not entry.model:
        raise ProviderMisconfigured(f"providers.llm.{key}: model is required")
    settings["max_concurrent"] = entry.max_concurrent  # calls in flight per API key (issue 14)
    if entry.type == "anthropic":
        return AnthropicProvider(
            key, model=entry.model, base_url=entry.base_url or ANTHROPIC_BASE_URL, api_keys=keys, **settings
        )
    if entry.type == "openai":
        return OpenAIProvider(
            key, model=entry.model, base_url=entry.base_url or OPENAI_BASE_URL, api_keys=keys, **settings
        )
    if not entry.base_url:
        raise ProviderMisconfigured(f"providers.llm.{key}: openai-compatible needs base_url")
    return OpenAICompatibleProvider(
        key, model=entry.model, base_url=entry.base_url, api_keys=keys, **settings
    )


def build_providers(
    company: config.Company,
    *,
    base_dir: str | Path = ".",
    env: Mapping[str, str] | None = None,
    board: CooldownBoard | None = None,
) -> ProviderSet:
    """Build every ``providers.llm`` entry of an applied company (CO-3).

    Entries that cannot be built are logged once as ``provider_unconfigured{key, reason}`` and
    left out; chains skip them. Never raises for an entry.

    Args:
        company: The company with secrets resolved (:func:`shared.config.resolve_secrets`).
        base_dir: The company file's directory (offline scripts are relative to it).
        env: See :func:`build_provider`.
        board: The node's :class:`~shared.providers.CooldownBoard` (one per node, outliving
            applies); None for chains that never bench a key (CO-42).

    Returns:
        The set; close it with :meth:`ProviderSet.aclose` when the apply retires (the board
        stays: it belongs to the node).
    """
    built: dict[str, LlmProvider] = {}
    skipped: dict[str, str] = {}
    for key, entry in company.providers.llm.items():
        try:
            built[key] = build_provider(key, entry, base_dir=base_dir, env=env)
        except ProviderMisconfigured as e:
            skipped[key] = str(e)
            _log.warning("provider_unconfigured", key=key, reason=str(e))
    return ProviderSet(built, declared=list(company.providers.llm), unconfigured=skipped, board=board)
