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

from ..._errors import InvalidField, NotFound
from ...log._decide import iso
from ...log._ids import BUCKETS
from ...store._fts import LexicalQuery, lexical_query
from ...store._sql import SqlConn
from ...store._store import FastConn
from ._pages import SPACE_RE, find_page, space_by_key
from ._tables import T_CONTAINERS, T_PAGES

__all__ = ["SNIPPET", "bucket_range", "get_page", "list_pages", "list_spaces", "page_view", "search_pages"]

SNIPPET = 200
"""Longest snippet in characters (CO-25)."""
_BM25 = "bm25(pages_fts, 0.0, 0.0, 2.0, 1.0)"
"""A hit's relevance: FTS5 BM25 over title ×2 and body (CO-25); lower is better."""
_SNIP = "snippet(pages_fts, 3, '', '', '…', 32)"
"""A hit's snippet: 32 tokens of body around the first match (ES-66); the hybrid ranking's lexical
list of 150 skips it (``snippets=False``) and reads it for the final hits only."""
_NO_SNIP = "''"
_SPARE = 8
"""Candidates :func:`_top_hits` ranks beyond ``limit``: a tie at the cut within them is settled
from ``pages`` alone, without reading the matches again."""


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

    ``conn`` is a reader thread's SQLAlchemy connection or the inline read path's ``PlainConn``
    (``EstateStore.read_inline``); either way the statements go to ``sqlite3`` directly. A whole
    search ranks in the index first (:func:`_top_hits`); a slice, and a whole search whose best
    match has no published page, run as one statement (:func:`_one_statement`).

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
    buckets = bucket_range(args["buckets"]) if args.get("buckets") is not None else None
    space = _space_key(conn, str(args["space"])) if args.get("space") else None
    plain = FastConn(conn) if isinstance(conn, Connection) else conn
    if buckets is None:
        found = _top_hits(plain, lexical, space, limit)
        if found is not None:
            return found
    return _one_statement(plain, lexical, space, limit, buckets)


def _space_key(conn: SqlConn, key: str) -> str:
    """``key`` when it names a space (literal SQL: also on the inline read path).

    Raises:
        InvalidField: not a space key shape (as :func:`~shared.estate._pages.space_by_key`);
        NotFound: no such space.
    """
    if not SPACE_RE.match(key):
        raise InvalidField("space", f"{key!r} is not a space key (upper-case letters and digits, e.g. ENG)")
    if conn.exec_driver_sql(f"SELECT 1 FROM {T_CONTAINERS.name} WHERE key = ?", (key,)).first() is None:
        raise NotFound("space", key)
    return key


def _one_statement(
    conn: SqlConn,
    lexical: LexicalQuery,
    space: str | None,
    limit: int,
    buckets: tuple[int, int] | None,
    snippets: bool = True,
) -> list[dict[str, Any]]:
    """:func:`search_pages` as one statement: every match joined with its page, ordered, cut.

    The reference order (``ORDER BY rank_class, score, p.id``); :func:`_top_hits` returns the
    same hits cheaper. ``buckets`` (a slice, ES-62) keeps the pages whose ``search_shard`` is in
    that inclusive range, and its hits carry ``rank_class``, ``bm25`` and ``search_shard``.
    """
    binds: list[Any] = []

    def bind(value: str) -> str:
        binds.append(value)
        return "?"

    rank = lexical.rank_sql("pages_fts", ("p.title", "p.body"), bind)
    sql = (
        f"SELECT p.id, p.container, p.title, p.search_shard, {_BM25} AS score, "
        f"{_SNIP if snippets else _NO_SNIP} AS snip, {rank} AS rank_class "
        "FROM pages_fts JOIN pages p ON p.rowid = pages_fts.rowid "
        "WHERE pages_fts MATCH ? AND p.status = 'published'"
    )
    binds.append(lexical.some)
    if space is not None:
        sql += " AND pages_fts.container = ?"
        binds.append(space)
    if buckets is not None:  # ES-62: this node's range only; bm25() still reads the whole table's statistics
        sql += " AND p.search_shard BETWEEN ? AND ?"
        binds += buckets
    sql += " ORDER BY rank_class, score, p.id LIMIT ?"
    binds.append(limit)
    hits = []
    for r in conn.exec_driver_sql(sql, tuple(binds)).all():
        hit = _hit(r.id, r.container, r.title, r.snip, r.score)
        if buckets is not None:
            hit.update(rank_class=int(r.rank_class), bm25=float(r.score), search_shard=int(r.search_shard))
        hits.append(hit)
    return hits


def _hit(page_id: str, space: str, title: str, snip: str | None, score: float) -> dict[str, Any]:
    """One hit's public shape: the snippet's blanks collapsed and cut to :data:`SNIPPET` characters."""
    snippet = " ".join(str(snip or "").split())
    if len(snippet) > SNIPPET:
        snippet = snippet[: SNIPPET - 1] + "…"
    return {
        "page_id": page_id,
        "space": space,
        "title": title,
        "snippet": snippet,
        "score": round(-float(score), 9),
    }


def _top_hits(
    conn: SqlConn, lexical: LexicalQuery, space: str | None, limit: int, snippets: bool = True
) -> list[dict[str, Any]] | None:
    """The undivided search's hits, ranked by the index alone, ``pages`` read for the hits only.

    The one-statement search (:func:`_one_statement`) joins every matching index row with its
    ``pages`` row and computes its class before ordering: at 10 000 pages the join was two thirds
    of a search and the class test per row most of the rest (issue 16, figure 7). The same order
    comes from two smaller scans of the index, because a page in class 0, 1 or 2 holds every word:

    1. the pages holding every word (``MATCH`` of :attr:`LexicalQuery.every`), classed and ranked
       by ``(rank_class, bm25)``, the best ``limit +`` :data:`_SPARE` kept. ``bm25()`` reads the
       same phrases as under :attr:`LexicalQuery.some`, so a page scores alike in both;
    2. only when fewer hold every word: the pages holding some word, ranked by ``bm25`` alone,
       the best ``limit + _SPARE`` beyond those of step 1 kept as class 3.

    The best ``limit`` candidates are the hits unless the last of them ties with the next (equal
    class and ``bm25``: pages holding the same words alike); then the tied pages are ordered by
    ``p.id`` (:func:`_by_id`), or read again by id when the tie may go on past the candidates
    (:func:`_tied`). One last statement reads the hits' pages and snippets, under the same
    ``MATCH`` expression (so the same snippet). The class-0 test reads the index row's title and
    body, which the applier writes equal to the page's (``_pages._fts``). An ungraded query (one
    word) skips step 1: every hit is class 0.

    Returns:
        The hits, exactly those of :func:`_one_statement`; None when a page that would be a hit
        is not published (the caller then runs the one-statement search, which leaves it out).
    """
    where, extra = (" AND pages_fts.container = ?", (space,)) if space is not None else ("", ())
    want = limit + _SPARE
    found: dict[int, tuple[int, float]] = {}  # index rowid -> (rank_class, bm25)
    every, every_binds = "", ()
    if lexical.graded:
        binds: list[Any] = []

        def bind(value: str) -> str:
            binds.append(value)
            return "?"

        rank = lexical.rank_sql("pages_fts", ("pages_fts.title", "pages_fts.body"), bind)
        every = (
            f"SELECT pages_fts.rowid AS rid, {_BM25} AS score, {rank} AS rank_class "
            f"FROM pages_fts WHERE pages_fts MATCH ?{where}"
        )
        every_binds = (*binds, lexical.every, *extra)
        for r in conn.exec_driver_sql(
            f"{every} ORDER BY rank_class, score LIMIT ?", (*every_binds, want)
        ).all():
            found[r.rid] = (int(r.rank_class), float(r.score))
    held = set(found)  # the pages holding every word, classed
    some = f"SELECT pages_fts.rowid AS rid, {_BM25} AS score FROM pages_fts WHERE pages_fts MATCH ?{where}"
    some_binds = (lexical.some, *extra)
    cls = 3 if lexical.graded else 0
    more = len(found) == want  # matches not in hand may follow, each ranking at or below every candidate
    if not more:  # every page holding every word is in hand: now the best of the rest
        rows = conn.exec_driver_sql(f"{some} ORDER BY score LIMIT ?", (*some_binds, want + len(held))).all()
        for r in rows:
            found.setdefault(r.rid, (cls, float(r.score)))
        more = len(rows) == want + len(held)
    ranked = sorted(found.items(), key=lambda kv: kv[1])
    chosen = dict(ranked[:limit])
    if len(ranked) > limit and ranked[limit - 1][1] == ranked[limit][1]:  # the cut falls inside a tie
        cut = ranked[limit][1]
        chosen = {rid: key for rid, key in ranked if key < cut}
        need = limit - len(chosen)
        if not (more and ranked[-1][1] == cut):  # every tied page is in hand
            tied = _by_id(conn, [rid for rid, key in ranked if key == cut])
        elif cut[0] < cls:  # classes 0..2: among the pages holding every word
            tied = _tied(conn, every, every_binds, "c.rank_class = ? AND c.score = ?", cut, need)
        else:
            tied = _tied(conn, some, some_binds, "c.score = ?", cut[1:], need + len(held))
            tied = [rid for rid in tied if rid not in held]
        if len(tied) < need:  # pages not published among them: the next ones are not in hand
            return None
        chosen.update((rid, cut) for rid in tied[:need])
    return _hits(conn, lexical, chosen, snippets)


def _by_id(conn: SqlConn, rowids: list[int]) -> list[int]:
    """Those of the index rowids ``rowids`` whose page is published, by ``p.id``."""
    rows = conn.exec_driver_sql(
        f"SELECT rowid AS rid FROM pages WHERE rowid IN ({', '.join('?' * len(rowids))}) "
        "AND status = 'published' ORDER BY id",
        tuple(rowids),
    ).all()
    return [int(r.rid) for r in rows]


def _tied(
    conn: SqlConn, ranked: str, binds: tuple[Any, ...], cond: str, key: tuple[Any, ...], n: int
) -> list[int]:
    """Index rowids of the first ``n`` published pages of ``ranked`` meeting ``cond`` (``key``), by ``p.id``."""
    rows = conn.exec_driver_sql(
        f"SELECT c.rid FROM ({ranked}) AS c JOIN pages p ON p.rowid = c.rid "
        f"WHERE {cond} AND p.status = 'published' ORDER BY p.id LIMIT ?",
        (*binds, *key, n),
    ).all()
    return [int(r.rid) for r in rows]


def _hits(
    conn: SqlConn, lexical: LexicalQuery, chosen: dict[int, tuple[int, float]], snippets: bool = True
) -> list[dict[str, Any]] | None:
    """The hits of the index rowids ``chosen`` (rowid → class, ``bm25``): pages and snippets, in order.

    ``CROSS JOIN`` keeps the index the outer loop: with ``pages`` outer, SQLite re-opened the
    ``MATCH`` for each row, three times slower.

    Returns:
        The hits by ``(rank_class, bm25, id)``; None when one of them has no published page.
    """
    if not chosen:
        return []
    rows = conn.exec_driver_sql(
        f"SELECT pages_fts.rowid AS rid, {_SNIP if snippets else _NO_SNIP} AS snip, "
        "p.id, p.container, p.title, p.status FROM pages_fts CROSS JOIN pages p ON p.rowid = pages_fts.rowid "
        f"WHERE pages_fts MATCH ? AND pages_fts.rowid IN ({', '.join('?' * len(chosen))})",
        (lexical.some, *chosen),
    ).all()
    if len(rows) != len(chosen) or any(r.status != "published" for r in rows):
        return None
    rows.sort(key=lambda r: (*chosen[r.rid], str(r.id)))
    return [_hit(r.id, r.container, r.title, r.snip, chosen[r.rid][1]) for r in rows]
