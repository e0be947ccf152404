"""Knowledge reads: page views, listings and the lexical search (CO-25, ES-60, ES-61, ES-65).

Search (issue 12, "Ranking people expect") matches pages holding at least one of the query's words
and ranks them by class, best first: the query's text as typed (``don't``, ``20.04``), then its
words as an exact phrase, then pages holding every word, then pages holding some; within a class
by SQLite FTS5 ``bm25()`` over title and body, the title weighted ×2 (CO-25), then page id (the
classes and the tokenizing are in :mod:`~shared.estate._fts`). It returns ``{page_id, space,
title, snippet (≤ 200 chars), score}``. A query without a word (empty, blanks, punctuation only)
is refused with one shape: ``InvalidField`` naming ``q``.

A search scans this node's whole index unless it is one slice of a divided search (ES-62): with
``buckets: [lo, hi]`` it keeps only pages whose ``search_shard`` is in that range, while ``bm25()``
still reads the statistics of the whole FTS5 table (every data node holds every page), so a slice's
scores are the global ones and slices merge exactly (ES-63, :mod:`~shared.estate._divided`). A
slice's hits also carry what the merge orders by: ``rank_class``, the raw ``bm25`` and the page's
``search_shard``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from ._decide import iso
from ._errors import InvalidField
from ._fts import lexical_query
from ._ids import BUCKETS
from ._pages import find_page, space_by_key
from ._schema import T_CONTAINERS, T_PAGES
from ._store import raw_sql

__all__ = ["SNIPPET", "bucket_range", "get_page", "list_pages", "list_spaces", "page_view", "search_pages"]

SNIPPET = 200
"""Longest snippet in characters (CO-25)."""


def page_view(conn: Connection, page_id: str, *, body: bool = True) -> dict[str, Any]:
    """Return one page (the answer of ``write_page``)."""
    row = conn.execute(select(T_PAGES).where(T_PAGES.c.id == page_id)).first()
    if row is None:
        return {"id": page_id}
    return _view(row, body=body)


def _view(row: Any, *, body: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": row.id,
        "space": row.container,
        "title": row.title,
        "version": row.version,
        "status": row.status,
        "author": row.author,
        "author_kind": row.author_kind,
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
        "search_shard": row.search_shard,
    }
    if body:
        out["body"] = row.body
    return out


def get_page(conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
    """``get_page{page_id | space+title}``.

    Raises:
        InvalidField, NotFound: neither given, unknown space, or no such page.
    """
    return _view(find_page(conn, args))


def list_pages(conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
    """``list_pages{space?, limit ≤ 500 (50), offset?}``: pages by title, without bodies.

    Raises:
        InvalidField, NotFound: a bad limit/offset, or an unknown space.
    """
    limit = args.get("limit", 50)
    offset = args.get("offset", 0)
    if not isinstance(limit, int) or not 1 <= limit <= 500:
        raise InvalidField("limit", "must be 1..500")
    if not isinstance(offset, int) or not 0 <= offset <= 1_000_000_000:
        raise InvalidField("offset", "must be 0..1000000000")
    q = select(T_PAGES)
    if args.get("space"):
        q = q.where(T_PAGES.c.container == space_by_key(conn, str(args["space"])).key)
    rows = conn.execute(q.order_by(T_PAGES.c.container, T_PAGES.c.address).offset(offset).limit(limit)).all()
    pages = [_view(r, body=False) for r in rows]
    return {"pages": pages, "count": len(pages), "limit": limit, "offset": offset}


def list_spaces(conn: Connection) -> list[dict[str, Any]]:
    """Every knowledge space."""
    return [
        {"key": c.key, "name": c.name, "unit": c.unit_id, "version": c.version}
        for c in conn.execute(select(T_CONTAINERS).order_by(T_CONTAINERS.c.key)).all()
    ]


def bucket_range(value: Any) -> tuple[int, int]:
    """Check a slice's bucket range ``[lo, hi]`` (ES-62): integers, ``0 <= lo <= hi <= 63``.

    Raises:
        InvalidField: naming ``buckets``.
    """
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        or not 0 <= value[0] <= value[1] < BUCKETS
    ):
        raise InvalidField("buckets", f"must be [lo, hi] with 0 <= lo <= hi <= {BUCKETS - 1}")
    return int(value[0]), int(value[1])


def search_pages(conn: Connection, args: dict[str, Any]) -> list[dict[str, Any]]:
    """``search_knowledge{query, space?, limit ≤ 20 (5), buckets?}``: hits best first.

    The ranking rule (issue 12, "Ranking people expect"): a page holding the query's text as typed
    ranks above one holding its words as an exact phrase, which ranks above one holding every word
    scattered, which ranks above one holding only some; within a class the BM25 relevance (title
    ×2) decides, then the page id. A page repeating one word therefore never outranks the page
    holding the phrase (``20.04``: "ubuntu 20.04" above "build 20 … 20 20 20").

    ``buckets: [lo, hi]`` makes it one slice of a divided search (ES-62, ES-63): only pages whose
    ``search_shard`` is in ``lo..hi`` (inclusive), scored with the whole table's statistics.

    Returns:
        ``[{page_id, space, title, snippet, score}]``; ``score`` is the page's BM25 relevance
        (higher is better), which orders hits within a class only. A slice's hits also carry
        ``rank_class`` (0..3, see :mod:`~shared.estate._fts`), ``bm25`` (the raw ``bm25()`` value,
        lower is better) and ``search_shard``.

    Raises:
        InvalidField: naming ``q``: a query that is missing or holds no word (empty, blanks or
            punctuation only, all refused alike); naming ``limit``: a bad limit; naming
            ``buckets``: a bad range.
        NotFound: an unknown space.
    """
    query = args.get("query")
    if not isinstance(query, str):
        raise InvalidField("q", "a query is required")
    limit = args.get("limit", 5)
    if not isinstance(limit, int) or not 1 <= limit <= 20:
        raise InvalidField("limit", "must be 1..20")
    lexical = lexical_query(query, field="q")
    sliced = args.get("buckets") is not None
    lo, hi = bucket_range(args["buckets"]) if sliced else (0, BUCKETS - 1)
    params: dict[str, Any] = {"q": lexical.some, "limit": limit}

    def bind(value: str) -> str:
        name = f"fts{len(params)}"
        params[name] = value
        return f":{name}"

    rank = lexical.rank_sql("pages_fts", ("p.title", "p.body"), bind)
    sql = (
        "SELECT p.id, p.container, p.title, p.search_shard, bm25(pages_fts, 0.0, 0.0, 2.0, 1.0) AS score, "
        f"snippet(pages_fts, 3, '', '', '…', 32) AS snip, {rank} AS rank_class "
        "FROM pages_fts JOIN pages p ON p.rowid = pages_fts.rowid "
        "WHERE pages_fts MATCH :q AND p.status = 'published'"
    )
    if args.get("space"):
        params["space"] = space_by_key(conn, str(args["space"])).key
        sql += " AND pages_fts.container = :space"
    if sliced:  # ES-62: this node's range only; bm25() still reads the whole table's statistics
        params["lo"], params["hi"] = lo, hi
        sql += " AND p.search_shard BETWEEN :lo AND :hi"
    sql += " ORDER BY rank_class, score, p.id LIMIT :limit"
    hits = []
    for r in raw_sql(conn, sql, **params):
        snippet = " ".join(str(r.snip or "").split())
        if len(snippet) > SNIPPET:
            snippet = snippet[: SNIPPET - 1] + "…"
        hit: dict[str, Any] = {
            "page_id": r.id,
            "space": r.container,
            "title": r.title,
            "snippet": snippet,
            "score": round(-float(r.score), 9),
        }
        if sliced:
            hit.update(rank_class=int(r.rank_class), bm25=float(r.score), search_shard=int(r.search_shard))
        hits.append(hit)
    return hits
