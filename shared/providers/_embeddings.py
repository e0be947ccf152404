"""Embeddings providers (AG-10): ``openai`` / ``openai-compatible`` over httpx and ``local`` (wordllama).

An :class:`Embedder` turns texts into L2-normalised float32 vectors of one width (``(n, dims)``
numpy arrays), tagged with its ``model`` and ``dims`` so only matching vectors are ever compared
(ES-66). :func:`build_embedder` builds the company's ``providers.embeddings`` entry (None: no
semantic search, AG-13 ``off``).

- **HTTP** (:class:`HttpEmbedder`): ``POST {base_url}/embeddings`` with ``{model, input: [...],
  encoding_format: "float", dimensions?}``, at most ``batch_size`` (128) inputs per call, each
  cut to ``max_input_chars``. Failures are the chat classes of CO-12 (:mod:`._errors`): 429/402
  ``RateLimited``, 5xx ``ServerFailed``, no answer in ``timeout_seconds`` ``ProviderTimeout``. A
  rate limit benches the entry on this node for the server's ``Retry-After`` (at least
  :data:`~._cooldowns.MIN_COOLDOWN`, at most :data:`~._cooldowns.COOLDOWN_CEILING`), as chat
  benches a key (CO-42): calls during the bench fail at once without reaching the server. An
  answer that does not map one-to-one onto the inputs (a missing, repeated, ``null`` or
  out-of-range ``index``, a vector of another width) is refused whole (:class:`BatchRefused`,
  AG-11, ES-67): nothing of it is used.
- **Local** (:class:`LocalEmbedder`): ``wordllama`` (the model's 256-wide weights ship inside the
  wheel), loaded once per process with ``cache_dir`` = the package directory and
  ``disable_download=True`` (infra-facts, last section: the wheel keeps its tokenizer where the
  default loader does not look, and the default loader would then download it). Embedding runs in
  a worker thread so the event loop never waits on it.

Every call counts ``crewlet_embedding_calls_total{provider}`` (``crewlet.embedding.calls``, AG §12).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import numpy as np
from prometheus_client import REGISTRY, Counter

from shared import config

from ._cooldowns import COOLDOWN_CEILING, MIN_COOLDOWN
from ._errors import MalformedResponse, ProviderMisconfigured, ProviderTimeout, RateLimited, ServerFailed
from ._http import _error_text, parse_retry_after
from ._openai import OPENAI_BASE_URL

__all__ = [
    "BatchRefused",
    "Embedder",
    "HttpEmbedder",
    "LocalEmbedder",
    "build_embedder",
    "embedding_calls",
    "hash_vector",
    "normalise",
]


def _counter(name: str, doc: str, labels: list[str]) -> Counter:
    existing = getattr(REGISTRY, "_names_to_collectors", {}).get(name)
    if isinstance(existing, Counter):
        return existing
    return Counter(name, doc, labels)


_CALLS = _counter(
    "crewlet_embedding_calls", "Embedding provider calls, by provider type (AG-10).", ["provider"]
)


def embedding_calls() -> Counter:
    """The ``crewlet_embedding_calls_total{provider}`` counter (``crewlet.embedding.calls``, AG-10)."""
    return _CALLS


class BatchRefused(MalformedResponse):
    """A batch answer that does not map one-to-one onto its inputs: refused whole (AG-11, ES-67)."""


def normalise(matrix: np.ndarray) -> np.ndarray:
    """Return ``matrix`` (``(n, d)``) as float32 rows of length 1 (a zero row stays zero)."""
    m = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: np.ndarray = (m / norms).astype(np.float32, copy=False)
    return out


_WORD = re.compile(r"\w+", re.UNICODE)


def hash_vector(text: str, dims: int = 256) -> list[float]:
    """The scripted model ``scripted-hash-256`` (AG §0): feature hashing of lower-cased word stems.

    A stem is a word cut to its first 6 characters; each stem adds 1 at ``sha256(stem) mod dims``.
    The vector is L2-normalised (zero for a text without a word). For plumbing tests only: two
    texts are near exactly when they share words.
    """
    v = np.zeros(dims, dtype=np.float32)
    for w in _WORD.findall(text.lower()):
        v[int.from_bytes(hashlib.sha256(w[:6].encode()).digest()[:4], "big") % dims] += 1.0
    n = float(np.linalg.norm(v))
    return [float(x) for x in (v / n if n else v)]


class Embedder(ABC):
    """One embeddings provider (AG-10).

    Attributes:
        provider: The entry's type (``openai``, ``openai-compatible``, ``local``): the metric label.
        model: The model id vectors are tagged with.
        dims: The vector width.
        batch_size: Inputs per provider call.
        max_input_chars: An input is cut to this many characters before it is sent.
    """

    provider: str
    model: str
    dims: int
    batch_size: int = 128
    max_input_chars: int = 8000

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` in batches of :attr:`batch_size`.

        Returns:
            ``(len(texts), dims)`` float32, each row L2-normalised, row ``i`` for ``texts[i]``.

        Raises:
            LLMError: a call failed (``RateLimited``, ``ServerFailed``, ``ProviderTimeout``,
                :class:`BatchRefused`...); nothing of a failed batch is returned.
        """
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        out = []
        for i in range(0, len(texts), self.batch_size):
            batch = [t[: self.max_input_chars] for t in texts[i : i + self.batch_size]]
            _CALLS.labels(provider=self.provider).inc()
            out.append(await self.embed_batch(batch))
        return np.concatenate(out)

    @abstractmethod
    async def embed_batch(self, texts: list[str]) -> np.ndarray:
        """One provider call for at most :attr:`batch_size` inputs (already cut); ``(n, dims)`` normalised."""

    async def aclose(self) -> None:
        """Release what the embedder holds (connections; nothing by default)."""
        return None


class HttpEmbedder(Embedder):
    """``openai`` / ``openai-compatible``: ``POST {base_url}/embeddings`` (AG-10).

    Args:
        provider: ``openai`` or ``openai-compatible``.
        model: The model id.
        dims: The width the answer must have.
        base_url: The API base (``.../v1``).
        api_key: Sent as ``Authorization: Bearer``; empty sends none.
        send_dimensions: Ask the server for ``dims`` (``dimensions`` was configured).
        batch_size: Inputs per call.
        timeout_seconds: Per call.
        max_input_chars: Inputs are cut to this.
    """

    def __init__(
        self,
        *,
        provider: str,
        model: str,
        dims: int,
        base_url: str,
        api_key: str = "",
        send_dimensions: bool = False,
        batch_size: int = 128,
        timeout_seconds: float = 30.0,
        max_input_chars: int = 8000,
    ) -> None:
        self.provider, self.model, self.dims = provider, model, dims
        self.url = base_url.rstrip("/") + "/embeddings"
        self.batch_size, self.max_input_chars = batch_size, max_input_chars
        self.timeout_seconds = timeout_seconds
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._send_dimensions = send_dimensions
        self._client: httpx.AsyncClient | None = None
        self._benched_until = 0.0

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_seconds))
        return self._client

    @property
    def benched_for(self) -> float:
        """Seconds left on this entry's rate-limit bench (0: callable)."""
        return max(0.0, self._benched_until - time.time())

    async def embed_batch(self, texts: list[str]) -> np.ndarray:
        """One ``/embeddings`` call (see the module docstring for the failure classes)."""
        if self.benched_for > 0:
            raise RateLimited(
                f"embeddings: benched for {self.benched_for:.0f} s after a rate limit",
                provider_key="embeddings",
                retry_after=self.benched_for,
            )
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self._send_dimensions:
            body["dimensions"] = self.dims
        try:
            resp = await self._http().post(self.url, json=body, headers=self._headers)
        except httpx.TimeoutException:
            raise ProviderTimeout(
                f"embeddings: no answer within {self.timeout_seconds:g} s", provider_key="embeddings"
            ) from None
        except httpx.HTTPError as e:
            raise ServerFailed(f"embeddings: {type(e).__name__}: {e}", provider_key="embeddings") from None
        if resp.status_code >= 300:
            self._fail(resp)
        try:
            data = resp.json()
        except ValueError:
            raise MalformedResponse("embeddings: the answer is not JSON", provider_key="embeddings") from None
        return self._vectors(data, len(texts))

    def _fail(self, resp: httpx.Response) -> None:
        status = resp.status_code
        message = f"embeddings: HTTP {status}: {_error_text(resp.content)}"
        retry_after = parse_retry_after(resp.headers.get("retry-after"))
        if status in (429, 402):
            self._benched_until = time.time() + min(
                COOLDOWN_CEILING.total_seconds(), max(MIN_COOLDOWN.total_seconds(), retry_after or 0.0)
            )
            raise RateLimited(message, provider_key="embeddings", status=status, retry_after=retry_after)
        if status == 408:
            raise ProviderTimeout(message, provider_key="embeddings", status=status)
        raise ServerFailed(message, provider_key="embeddings", status=status, retry_after=retry_after)

    def _vectors(self, data: Any, n: int) -> np.ndarray:
        """File each answered vector by its ``index``; refuse the batch unless it maps one-to-one."""
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list) or len(items) != n:
            got = len(items) if isinstance(items, list) else "no"
            raise BatchRefused(f"embeddings: {got} vectors for {n} inputs", provider_key="embeddings")
        out = np.zeros((n, self.dims), dtype=np.float32)
        seen: set[int] = set()
        for item in items:
            idx = item.get("index") if isinstance(item, dict) else None
            vec = item.get("embedding") if isinstance(item, dict) else None
            if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < n or idx in seen:
                raise BatchRefused(
                    f"embeddings: index {idx!r} is missing, repeated or out of range",
                    provider_key="embeddings",
                )
            if not isinstance(vec, list) or len(vec) != self.dims:
                width = len(vec) if isinstance(vec, list) else None
                raise BatchRefused(
                    f"embeddings: a vector of width {width}, not {self.dims}", provider_key="embeddings"
                )
            seen.add(idx)
            try:
                out[idx] = np.asarray(vec, dtype=np.float32)
            except (TypeError, ValueError):
                raise BatchRefused(
                    "embeddings: a vector holds a non-number", provider_key="embeddings"
                ) from None
        return normalise(out)

    async def aclose(self) -> None:
        """Close the connection pool."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


_MODELS: dict[str, Any] = {}
_LOAD = threading.Lock()


def _load_wordllama(config_name: str, dims: int | None) -> Any:
    """Load (once per process) a wordllama model from the weights inside its wheel, offline."""
    with _LOAD:
        key = f"{config_name}:{dims}"
        if key not in _MODELS:
            import wordllama  # type: ignore[import-untyped]  # local import: only type local pays for it

            root = os.path.dirname(wordllama.__file__)
            _MODELS[key] = wordllama.WordLlama.load(
                config=config_name, dim=dims or 256, cache_dir=root, disable_download=True
            )
        return _MODELS[key]


class LocalEmbedder(Embedder):
    """``type: local`` (AG-10): a ``wordllama`` model run on the CPU in a worker thread, no network.

    Args:
        model: ``wordllama/<config>_<dim>`` (``wordllama/l2_supercat_256``).
        batch_size: Inputs per call.
        max_input_chars: Inputs are cut to this.

    Raises:
        ProviderMisconfigured: not a ``wordllama/<config>_<dim>`` id, or the package is missing.
    """

    provider = "local"

    def __init__(self, model: str, *, batch_size: int = 128, max_input_chars: int = 8000) -> None:
        m = re.fullmatch(r"wordllama/([a-z0-9_]+?)_(\d+)", model)
        if m is None:
            raise ProviderMisconfigured(
                f"providers.embeddings.model: {model!r} is not wordllama/<config>_<dim>"
            )
        self.model, self._config, self.dims = model, m.group(1), int(m.group(2))
        self.batch_size, self.max_input_chars = batch_size, max_input_chars

    def load(self) -> Any:
        """Load the model now (else at the first call); raises ProviderMisconfigured when it cannot."""
        try:
            return _load_wordllama(self._config, self.dims)
        except ImportError:
            raise ProviderMisconfigured(
                "providers.embeddings.type: local needs: pip install wordllama"
            ) from None

    async def embed_batch(self, texts: list[str]) -> np.ndarray:
        """Embed in a worker thread; ``(n, dims)`` normalised."""

        def run() -> np.ndarray:
            return np.asarray(self.load().embed(texts, norm=True), dtype=np.float32)

        return normalise(await asyncio.to_thread(run))


def build_embedder(
    entry: config.Embeddings | None, *, env: Mapping[str, str] | None = None
) -> Embedder | None:
    """Build ``providers.embeddings`` (AG-10), secrets already resolved.

    Args:
        entry: The company's entry; None means no semantic search.
        env: Where ``OPENAI_API_KEY`` is read for an empty ``api_key``; None for ``os.environ``.

    Returns:
        The embedder, or None for no entry.

    Raises:
        ProviderMisconfigured: a field is missing or the model's width is unknown (validation
            refuses these first; this is the run-time guard).
    """
    if entry is None:
        return None
    env = os.environ if env is None else env
    if entry.type == "local":
        model = entry.model or config.LOCAL_EMBEDDING_MODEL
        return LocalEmbedder(model, batch_size=entry.batch_size, max_input_chars=entry.max_input_chars)
    if not entry.model:
        raise ProviderMisconfigured("providers.embeddings.model is required")
    dims = entry.dimensions or config.EMBEDDING_WIDTHS.get(entry.model)
    if dims is None:
        raise ProviderMisconfigured(
            f"providers.embeddings.dimensions: the width of {entry.model!r} is unknown"
        )
    if entry.type == "openai-compatible" and not entry.base_url:
        raise ProviderMisconfigured("providers.embeddings.base_url is required for openai-compatible")
    return HttpEmbedder(
        provider=entry.type,
        model=entry.model,
        dims=dims,
        base_url=entry.base_url or OPENAI_BASE_URL,
        api_key=entry.api_key or (env.get("OPENAI_API_KEY", "") if entry.type == "openai" else ""),
        send_dimensions=entry.dimensions is not None,
        batch_size=entry.batch_size,
        timeout_seconds=entry.timeout_seconds,
        max_input_chars=entry.max_input_chars,
    )
