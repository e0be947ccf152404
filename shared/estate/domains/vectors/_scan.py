"""The two-stage vector scan of one copy (ES-66, AG-12): sign codes first, then exact cosine.

Stage one reads the narrow ``vector_codes`` table (1 bit per dimension) from a per-process cache
(rebuilt when the table's ``(count, max seq)`` for the model moves) and keeps the
:data:`KEEP` documents whose best window is nearest in Hamming distance (ties by id); stage two
reads those documents' exact vectors from ``vector_windows`` and scores each document as the
cosine of its best window (vectors are L2-normalised; scores summed in float64 row by row, so a
window scores the same whatever else is scanned with it).

While a model's vectors fit in :data:`MATRIX_BYTES` the cache also holds them (the same float32
bytes, so the scores are the same), and stage two reads nothing from disk.

Why numpy and not ``sqlite-vec``: the interpreter these nodes run has a ``sqlite3`` without
``enable_load_extension`` (infra-facts), so the extension would need a second SQLite binding
(``apsw`` / ``pysqlite3-binary``) beside the copy's own connection; the scan is a few array
operations over a cache of 32 bytes per window (256-wide codes), and the exact vectors are read
for the candidates only above :data:`MATRIX_BYTES`, so a node's memory stays bounded.

Divided searches (ES-62, ES-63) stay exact: a slice returns its stage-one candidates with their
distance *and* exact score (:func:`scan`), and :func:`merge_semantic` keeps the global
:data:`KEEP` by ``(distance, id)`` before ranking by score, which is exactly what one node
scanning everything keeps (a document among the global nearest is among its own slice's nearest).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ...store import _sql as sql

__all__ = ["DEPTH", "KEEP", "merge_semantic", "scan"]

KEEP = 1200
"""Documents stage one keeps (ES-66)."""
DEPTH = 150
"""Documents the semantic list keeps after the exact rerank (ES-66, AG-12)."""
_CHUNK = 500
MATRIX_BYTES = 64 * 1024 * 1024
"""A model's exact vectors are cached (as float64) beside its codes while they fit in this many
bytes (32 768 windows of 256); above it stage two reads the candidates' vectors from
``vector_windows``. Every data node holds the same windows, so every node takes the same path."""


class _Codes:
    """One model's codes: rows sorted by source id, segment starts per document."""

    def __init__(self, rows: list[Any], dims: int, *, exact: bool = False) -> None:
        self.ids: list[str] = []
        self.exact = (
            np.frombuffer(b"".join(bytes(r.vector) for r in rows), dtype="<f4")
            .reshape(len(rows), dims)
            .astype(np.float64)
            if exact and rows
            else None
        )
        starts: list[int] = []
        words = -(-dims // 64)
        packed = np.zeros((len(rows), words * 8), dtype=np.uint8)
        shard = np.zeros(len(rows), dtype=np.int16)
        for i, r in enumerate(rows):
            if not self.ids or self.ids[-1] != r.source_id:
                self.ids.append(str(r.source_id))
                starts.append(i)
            raw = bytes(r.code)
            packed[i, : len(raw)] = np.frombuffer(raw, dtype=np.uint8)
            shard[i] = int(r.shard)
        self.codes = packed.view(np.uint64) if len(rows) else np.zeros((0, words), dtype=np.uint64)
        self.shard = shard
        self.starts = np.asarray(starts, dtype=np.int64)
        self.doc_of_row = (
            np.repeat(np.arange(len(starts)), np.diff(np.append(self.starts, len(rows))))
            if starts
            else np.zeros(0, dtype=np.int64)
        )


_CACHE: dict[tuple[str, str, int], tuple[tuple[int, int], _Codes]] = {}
_LOCK = threading.Lock()


def _codes(conn: Any, model: str, dims: int) -> _Codes:
    path = str(sql.rows(conn, "PRAGMA database_list")[0].file)
    stamp_row = sql.one(
        conn,
        "SELECT count(*) AS n, max(seq) AS s FROM vector_codes WHERE model = ? AND dims = ?",
        (model, dims),
    )
    stamp = (int(stamp_row.n or 0), int(stamp_row.s or 0))
    key = (path, model, dims)
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
    exact = stamp[0] * dims * 8 <= MATRIX_BYTES
    rows = sql.rows(
        conn,
        "SELECT c.source_id, c.shard, c.code"
        + (", w.vector" if exact else "")
        + " FROM vector_codes c "
        + ("JOIN vector_windows w ON w.subject = c.subject " if exact else "")
        + "WHERE c.model = ? AND c.dims = ? AND c.source_kind = 'page' ORDER BY c.source_id, c.subject",
        (model, dims),
    )
    built = _Codes(rows, dims, exact=exact)
    with _LOCK:
        _CACHE[key] = (stamp, built)
    return built


def scan(
    conn: Any,
    vector: np.ndarray,
    model: str,
    dims: int,
    *,
    buckets: tuple[int, int] | None = None,
    allowed: set[str] | None = None,
) -> list[tuple[str, int, float]]:
    """Stage one and two over this copy's windows of ``model``/``dims`` (pages).

    Args:
        conn: A read connection (literal SQL).
        vector: The query, ``(dims,)``, L2-normalised.
        model: Only windows of this model are compared (ES-66).
        dims: And of this width.
        buckets: Only pages whose search bucket is in ``[lo, hi]`` (a slice, ES-62).
        allowed: Only these page ids (a space filter); None for all.

    Returns:
        ``[(page_id, distance, score)]`` for the stage-one candidates (at most :data:`KEEP`),
        ``distance`` the best window's Hamming distance, ``score`` the best window's cosine.
    """
    idx = _codes(conn, model, dims)
    if not idx.ids:
        return []
    q = np.asarray(vector, dtype=np.float32)
    words = idx.codes.shape[1]
    qbytes = np.zeros(words * 8, dtype=np.uint8)
    packed = np.packbits(q > 0)
    qbytes[: packed.size] = packed
    dist = np.bitwise_count(idx.codes ^ qbytes.view(np.uint64)).sum(axis=1).astype(np.int64)
    far = dims + 1
    if buckets is not None:
        dist[(idx.shard < buckets[0]) | (idx.shard > buckets[1])] = far
    if allowed is not None:
        keep = np.fromiter((d in allowed for d in idx.ids), dtype=bool, count=len(idx.ids))
        dist[~keep[idx.doc_of_row]] = far
    best = np.minimum.reduceat(dist, idx.starts)
    docs = np.nonzero(best < far)[0]
    order = docs[np.lexsort((docs, best[docs]))][:KEEP]  # ids are sorted, so the doc index orders by id
    chosen = {idx.ids[int(d)]: int(best[d]) for d in order}
    if idx.exact is not None:
        return _exact_cached(idx, q, order, best)
    return _exact(conn, q, model, dims, chosen)


def _exact_cached(
    idx: _Codes, q: np.ndarray, order: np.ndarray, best: np.ndarray
) -> list[tuple[str, int, float]]:
    """Stage two from the cached vectors: every window's cosine in one product, each page its best."""
    assert idx.exact is not None
    per_doc = np.maximum.reduceat(idx.exact @ q.astype(np.float64), idx.starts)
    return [(idx.ids[int(d)], int(best[d]), round(float(per_doc[d]), 9)) for d in order]


def _exact(
    conn: Any, q: np.ndarray, model: str, dims: int, chosen: dict[str, int]
) -> list[tuple[str, int, float]]:
    """Each chosen page's best window cosine (float64 sums, row by row)."""
    q64 = q.astype(np.float64)
    scores: dict[str, float] = {}
    ids = list(chosen)
    for i in range(0, len(ids), _CHUNK):
        part = ids[i : i + _CHUNK]
        rows = sql.rows(
            conn,
            "SELECT source_id, vector FROM vector_windows WHERE source_kind = 'page' AND model = ? AND dims = ? "
            f"AND source_id IN ({', '.join('?' * len(part))})",
            (model, dims, *part),
        )
        if not rows:
            continue
        mat = np.frombuffer(b"".join(bytes(r.vector) for r in rows), dtype="<f4").reshape(len(rows), dims)
        s = (mat.astype(np.float64) * q64).sum(axis=1)
        for r, v in zip(rows, s, strict=True):
            if float(v) > scores.get(r.source_id, -2.0):
                scores[r.source_id] = float(v)
    return [(d, chosen[d], round(scores[d], 9)) for d in ids if d in scores]


def merge_semantic(lists: list[list[tuple[str, int, float]]], depth: int = DEPTH) -> list[tuple[str, float]]:
    """The global semantic list (ES-63): the :data:`KEEP` nearest by ``(distance, id)`` over every
    slice, then by ``(-score, id)``, cut to ``depth``. One list (one node) gives the same answer."""
    every = sorted((c for cs in lists for c in cs), key=lambda c: (c[1], c[0]))[:KEEP]
    every.sort(key=lambda c: (-c[2], c[0]))
    return [(c[0], c[2]) for c in every[:depth]]
