"""The answer a knowledge search gives (ES-65, AG-13): hits, state and the sentence a seat reads.

Part of the composition (the service's reads): ``building`` (this copy's index short of its first
lap), ``ok`` and ``empty`` answer differently; a hybrid search (AG-12) hands its mode, semantic
state and coverage along, which ride the answer as they are.
"""

from __future__ import annotations

from typing import Any

__all__ = ["search_answer"]


def search_answer(
    found: list[dict[str, Any]] | dict[str, Any], args: dict[str, Any], building: bool
) -> dict[str, Any]:
    """Wrap a search's hits: ``{hits, searched, failed, state, sentence, **hybrid fields}``.

    Args:
        found: The hits, or a hybrid search's ``{hits, mode_used, semantic, vector_coverage}``.
        args: The search's arguments (its ``query`` words the empty sentence).
        building: This copy's index has not finished its first lap (ES-65).
    """
    extra: dict[str, Any] = {}
    if isinstance(found, dict):  # a hybrid search (AG-12): its mode, semantic state and coverage ride along
        extra = {k: v for k, v in found.items() if k != "hits"}
        found = list(found.get("hits") or [])
    hits = found
    q = str(args.get("query", ""))
    if hits and building:
        sentence = "Results may be missing pages: the knowledge index here is still being built."
    elif hits:
        sentence = f"{len(hits)} page(s) matched."
    elif building:
        sentence = "The knowledge base is not searchable from here yet: its index is still being built."
    else:
        sentence = f"Nothing in the knowledge base matched {q!r}."
    state = "building" if building else ("ok" if hits else "empty")
    return {"hits": hits, "searched": True, "failed": False, "state": state, "sentence": sentence, **extra}
