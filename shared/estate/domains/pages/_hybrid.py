"""Hybrid ranking (AG-12, ES-63): BM25 and the vector scan fused by reciprocal rank, k = 60.

Two rankers over one scope: the lexical list (the ranking of :mod:`._read`: class, then BM25 with
the whole table's statistics) and the semantic list (the two-stage scan of
:mod:`shared.estate.domains.vectors`), each cut to :data:`DEPTH` (150). Fused score = Σ over the
lists naming a page of ``1 / (60 + rank)``, ranks 1-based; ties by lexical rank (a page the
lexical list lacks after every one it has), then page id. A slice of a divided search (ES-62)
returns both lists unfused (the lexical one with ``rank_class`` and ``bm25``, the semantic one
with each candidate's distance and score); the coordinator merges each by score and fuses once
(:func:`fuse_answer`), so a divided answer equals the undivided one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import Connection

from ..._errors import InvalidField
from ...store._fts import LexicalQuery, lexical_query
from ...store._sql import SqlConn
from ...store._store import FastConn
from .. import vectors
from ._read import SNIPPET, _one_statement, _space_key, _top_hits, bucket_range, search_pages

__all__ = ["DEPTH", "RRF_K", "STALE_BELOW", "fuse", "fuse_answer", "hybrid", "merge_lexical", "search"]

RRF_K = 60
"""The reciprocal rank fusion constant (ES-63)."""
DEPTH = 150
"""Each method's global list is cut to this (AG-12)."""
STALE_BELOW = 0.95
"""Below this share of the scope with current vectors the answer says ``stale`` (ES-67, AG-13)."""
_MODES = ("hybrid", "lexical", "semantic")


def query_vector(args: dict[str, Any]) -> tuple[np.ndarray, str, int] | None:
    """The query vector the asker embedded once (ES-62), or None when it sent none.

    Raises:
        InvalidField: naming ``mode`` (unknown), ``vector``, ``model`` or ``dims`` (malformed).
    """
    mode = args.get("mode", "lexical")
    if mode not in _MODES:
        raise InvalidField("mode", f"{mode!r} is not one of {', '.join(_MODES)}")
    raw = args.get("vector")
    if raw is None or mode == "lexical":
        return None
    model, dims = args.get("model"), args.get("dims")
    if not isinstance(model, str) or not model:
        raise InvalidField("model", "a query vector names its model")
    if not isinstance(dims, int) or not isinstance(raw, list) or len(raw) != dims:
        raise InvalidField("vector", "a query vector is a list of dims numbers")
    try:
        vec = np.asarray(raw, dtype=np.float32)
    except (TypeError, ValueError):
        raise InvalidField("vector", "a query vector holds numbers only") from None
    return vec, model, dims


def search(conn: Any, args: dict[str, Any]) -> list[dict[str, Any]] | dict[str, Any]:
    """``pages.search``: lexical (:func:`~._read.search_pages`) unless the asker sent a query vector
    and ``mode`` is ``hybrid`` or ``semantic`` (AG-12, AG-13); then :func:`hybrid`.

    Raises:
        InvalidField: as :func:`~._read.search_pages`, and naming ``mode``, ``vector``, ``model``.
        NotFound: an unknown space.
    """
    qv = query_vector(args)
    if qv is None:
        return search_pages(conn, args)
    query = args.get("query")
    if not isinstance(query, str):
        raise InvalidField("q", "a query is required")
    limit = args.get("limit", 5)
    if not isinstance(limit, int) or not 1 <= limit <= 20:
        raise InvalidField("limit", "must be 1..20")
    lexical = lexical_query(query, field="q")
    buckets = bucket_range(args["buckets"]) if args.get("buckets") is not None else None
    space = _space_key(conn, str(args["space"])) if args.get("space") else None
    plain = FastConn(conn) if isinstance(conn, Connection) else conn
    return hybrid(plain, args, lexical, space, limit, buckets, qv)


def _lexical_list(
    conn: SqlConn, lexical: LexicalQuery, space: str | None, buckets: tuple[int, int] | None
) -> list[dict[str, Any]]:
    if buckets is None:
        found = _top_hits(conn, lexical, space, DEPTH, snippets=False)
        if found is not None:
            return found
    return _one_statement(conn, lexical, space, DEPTH, buckets, snippets=False)


def _space_ids(conn: SqlConn, space: str | None) -> set[str] | None:
    if space is None:
        return None
    return {
        str(r.id) for r in conn.exec_driver_sql("SELECT id FROM pages WHERE container = ?", (space,)).all()
    }


def hybrid(
    conn: SqlConn,
    args: dict[str, Any],
    lexical: LexicalQuery,
    space: str | None,
    limit: int,
    buckets: tuple[int, int] | None,
    qv: tuple[np.ndarray, str, int],
) -> dict[str, Any]:
    """A hybrid (or semantic-only) search of this copy, or one slice of a divided one.

    Returns:
        A whole search: :func:`fuse_answer`'s answer. A slice: ``{"hits": [], "lexical": [...],
        "semantic": [[id, distance, score]], "vector_coverage": [current, total]}``.
    """
    vec, model, dims = qv
    lex = [] if args.get("mode") == "semantic" else _lexical_list(conn, lexical, space, buckets)
    sem = vectors.scan(conn, vec, model, dims, buckets=buckets, allowed=_space_ids(conn, space))
    current, total = vectors.coverage(conn, model, dims, space=space, buckets=buckets, ttl=2.0)
    if buckets is not None:
        return {
            "hits": [],
            "lexical": lex,
            "semantic": [list(c) for c in sem],
            "vector_coverage": [current, total],
        }
    return fuse_answer(
        conn,
        lex,
        vectors.merge_semantic([sem]),
        limit,
        current,
        total,
        str(args.get("mode")),
        match=lexical.some,
    )


def merge_lexical(slices: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The global lexical list from slices (ES-63): by ``(rank_class, bm25, page id)``, cut to :data:`DEPTH`."""
    every = [h for hits in slices for h in hits]
    every.sort(key=lambda h: (int(h["rank_class"]), float(h["bm25"]), str(h["page_id"])))
    return every[:DEPTH]


def fuse(lexical: list[str], semantic: list[str]) -> list[tuple[str, float, int | None, int | None]]:
    """Reciprocal rank fusion (AG-12): ``[(page_id, score, lexical_rank, semantic_rank)]`` best first."""
    lr = {d: i + 1 for i, d in enumerate(lexical)}
    sr = {d: i + 1 for i, d in enumerate(semantic)}
    out = []
    for d in dict.fromkeys([*lexical, *semantic]):
        score = (1 / (RRF_K + lr[d]) if d in lr else 0.0) + (1 / (RRF_K + sr[d]) if d in sr else 0.0)
        out.append((d, score, lr.get(d), sr.get(d)))
    out.sort(key=lambda t: (-t[1], t[2] if t[2] is not None else DEPTH + 1, t[0]))
    return out


def fuse_answer(
    conn: SqlConn,
    lex: list[dict[str, Any]],
    sem: list[tuple[str, float]],
    limit: int,
    current: int,
    total: int,
    mode: str,
    *,
    match: str | None = None,
) -> dict[str, Any]:
    """Fuse the global lists and read the hits' pages (published only).

    A hit the lexical list holds gets the snippet around its first matching term (``match``: the
    query's FTS5 expression; the lists of 150 carry none, ES-66); any other the page's opening.

    Returns:
        ``{"hits", "mode_used", "semantic": ok|stale, "vector_coverage": {current, total,
        fraction}}``; hits carry CO-25's fields plus ``kind``, ``lexical_rank``, ``semantic_rank``.
    """
    fused = fuse([str(h["page_id"]) for h in lex], [d for d, _ in sem])
    by_id = {str(h["page_id"]): h for h in lex}
    want = [t for t in fused[: limit * 2 + 8]]
    ids = [t[0] for t in want]
    rows = {}
    if ids:
        for r in conn.exec_driver_sql(
            f"SELECT rowid AS rid, id, container, title, substr(body, 1, 600) AS opening FROM pages "
            f"WHERE status = 'published' AND id IN ({', '.join('?' * len(ids))})",
            tuple(ids),
        ).all():
            rows[str(r.id)] = r
    snips: dict[str, str] = {}
    lex_ids = [d for d in ids if d in by_id and d in rows]
    if match and lex_ids:
        by_rid = {int(rows[d].rid): d for d in lex_ids}
        for r in conn.exec_driver_sql(
            "SELECT rowid AS rid, snippet(pages_fts, 3, '', '', '…', 32) AS snip FROM pages_fts "
            f"WHERE pages_fts MATCH ? AND rowid IN ({', '.join('?' * len(by_rid))})",
            (match, *by_rid),
        ).all():
            snips[by_rid[int(r.rid)]] = str(r.snip or "")
    hits = []
    for d, score, lrank, srank in want:
        r = rows.get(d)
        if r is None:
            continue
        snippet = " ".join((snips.get(d) or str(r.opening or "")).split())
        if len(snippet) > SNIPPET:
            snippet = snippet[: SNIPPET - 1] + "…"
        hits.append(
            {
                "page_id": d,
                "space": r.container,
                "title": r.title,
                "snippet": snippet,
                "score": round(score, 9),
                "kind": "page",
                "lexical_rank": lrank,
                "semantic_rank": srank,
            }
        )
        if len(hits) == limit:
            break
    fraction = round(current / total, 4) if total else 1.0
    return {
        "hits": hits,
        "mode_used": mode,
        "semantic": "ok" if fraction >= STALE_BELOW else "stale",
        "vector_coverage": {"current": current, "total": total, "fraction": fraction},
    }
