"""What a knowledge search answer says about how it searched (AG-13), and the query's one embedding.

The asker embeds the query once with the node's embeddings provider (ES-62: the coordinator and
every slice compare the same vector) and the data node ranks (AG-12); this module decides the mode
and words the answer:

- ``mode_requested``: ``hybrid`` | ``lexical`` | ``semantic``; the default is ``hybrid`` when the
  company has an embeddings provider, else ``lexical``. ``mode: semantic`` with no provider is
  refused (``semantic_unavailable``, suggesting ``hybrid``).
- ``semantic``: ``off`` (no provider: never ``search_degraded``, ES-64), ``skipped`` (the query
  could not be embedded: the provider failed, timed out or is benched; the search answers by words,
  never fails), ``stale`` (under 95 % of the scope has current vectors) or ``ok``.
- ``mode_used``: what ranked the hits; ``vector_coverage``: ``{current, total, fraction}``.
- ``sentence``: the search's own sentence, then AG-13's for ``off``, ``skipped`` and ``stale``.

Every answer counts ``crewlet_tracker_search_answers_total{mode, semantic}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import REGISTRY, Counter

from shared import logs
from shared.estate import InvalidField
from shared.providers import Embedder, LLMError

__all__ = ["MODES", "SENTENCES", "knowledge_search", "search_answers"]

MODES = ("hybrid", "lexical", "semantic")
SENTENCES = {
    "off": "Searched by words only: this company has no semantic search.",
    "skipped": "Searched by words only: the embedding service did not answer; pages using other words may be missing.",
    "stale": "{missing} of {total} documents in scope have no current vectors yet; recent edits may be missed.",
}
"""AG-13's sentences (``ok`` has none)."""

_log = logs.get("search")


def _counter() -> Counter:
    name = "crewlet_tracker_search_answers"
    existing = getattr(REGISTRY, "_names_to_collectors", {}).get(name)
    if isinstance(existing, Counter):
        return existing
    return Counter(
        name, "Knowledge search answers, by mode used and semantic state (AG-13).", ["mode", "semantic"]
    )


_ANSWERS = _counter()


def search_answers() -> Counter:
    """``crewlet_tracker_search_answers_total{mode, semantic}`` (``crewlet.tracker.search.answers``)."""
    return _ANSWERS


Run = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


async def knowledge_search(
    run: Run, query: str, *, space: str | None, limit: int, mode: str | None, embedder: Embedder | None
) -> dict[str, Any]:
    """Embed the query (once), run the search through ``run`` and word the answer (AG-13).

    Args:
        run: Sends ``pages.search`` with the given args and returns ``{data, meta}``.
        query: The query text.
        space: A space key, or None.
        limit: 1..20.
        mode: ``hybrid`` | ``lexical`` | ``semantic`` | None (the default for this company).
        embedder: The node's embeddings provider, None when the company has none.

    Raises:
        InvalidField: naming ``mode`` (unknown) or ``limit`` (over 20).
            ``mode: semantic`` without a provider is refused naming ``mode`` (``semantic_unavailable``).
    """
    requested = mode or ("hybrid" if embedder is not None else "lexical")
    if requested not in MODES:
        raise InvalidField("mode", f"{requested!r} is not one of {', '.join(MODES)}")
    if not isinstance(limit, int) or not 1 <= limit <= 20:
        raise InvalidField("limit", "must be 1..20")
    args: dict[str, Any] = {"query": query, "space": space, "limit": limit}
    semantic = "off"
    if embedder is None:
        if requested == "semantic":
            raise InvalidField(
                "mode",
                "semantic_unavailable: this company has no embeddings provider; search with mode hybrid",
            )
    elif requested != "lexical":
        try:
            vec = (await embedder.embed([query]))[0]
            args.update(
                mode=requested, vector=[float(x) for x in vec], model=embedder.model, dims=embedder.dims
            )
            semantic = "ok"
        except LLMError as e:
            semantic = "skipped"
            _log.warning("search_query_not_embedded", error=f"{type(e).__name__}: {e}")
    else:
        semantic = "ok"  # words asked for: nothing was skipped
    answer = await run(args)
    data = answer.get("data")
    if isinstance(data, dict):
        _describe(data, requested, semantic, "vector" in args)
    return answer


def _describe(data: dict[str, Any], requested: str, semantic: str, embedded: bool) -> None:
    data["mode_requested"] = requested
    if embedded and "mode_used" in data:
        semantic = str(data.get("semantic") or "ok")
    else:
        data["mode_used"] = "lexical"
        data.setdefault("vector_coverage", None)
    data["semantic"] = semantic
    note = None
    if semantic in ("off", "skipped"):
        note = SENTENCES[semantic]
    elif semantic == "stale":
        cov = data.get("vector_coverage") or {}
        total = int(cov.get("total") or 0)
        note = SENTENCES["stale"].format(missing=total - int(cov.get("current") or 0), total=total)
    if note and data.get("searched", True):
        data["sentence"] = f"{data.get('sentence') or ''} {note}".strip()
    _ANSWERS.labels(mode=data["mode_used"], semantic=semantic).inc()
