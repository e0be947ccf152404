"""Figure 7: knowledge search at 10 000 and 100 000 pages [floor: a raw FTS5 query on the same database].

The pages are **generated** from the shared knowledge pages (``/work/shared/data/knowledge``; the
repository's own Markdown when that folder is absent) **by word shuffling**: each page takes one
source page's words in a random order (seeded), 60-240 of them, with a title of 3-6 such words. So
the word frequencies are those of real knowledge pages, the content is not.

What is measured (in-process, the path a data node runs for a search it answers itself:
``EstateRouter.search_knowledge`` → the local ``EstateService`` → ``search_pages``: FTS5 ``bm25()``
over title ×2 and body, in the ranking classes, the 5 best joined with ``pages`` and given
snippets; on the event loop thread while searches cost under 5 ms of CPU, else on a reader
thread, so 10 000 pages search inline and 100 000 on a reader thread). The pages are bulk-loaded
into the estate's own SQLite file through its writer (rows of ``pages`` and ``pages_fts``, as the
applier writes them), bypassing the log: 100 000 writes through the log would take longer than the
whole benchmark. Queries are 3 distinct words drawn from the pages' vocabulary (seeded, the same
list for both sides).

The floor, interleaved query by query: the broadest ``MATCH`` expression ``search_pages`` uses
(``"w1" OR "w2" OR "w3"``: the same set of hits) ranked by the same ``bm25()`` weights, ``LIMIT 5``,
on the same ``estate.db`` through a plain ``sqlite3`` connection: no join, no snippets, and none of
the ranking classes (text as typed, phrase, every word) that ``search_pages`` orders by first, so
the ratio includes their cost (issue 16: a scan of the pages holding every word, and one statement
reading the 5 hits' pages and snippets).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import nats
from sqlalchemy import Connection

from shared import estate
from shared.router import EstateRouter

from ._ctx import Ctx
from ._env import KNOWLEDGE_DIR, PROJECT, REPO, nats_server
from ._result import Row, failed, row_from

__all__ = ["generate_pages", "run"]

_WORD = re.compile(r"\w+", re.UNICODE)
_FLOOR_SQL = "SELECT page_id, bm25(pages_fts, 0.0, 0.0, 2.0, 1.0) AS s FROM pages_fts WHERE pages_fts MATCH ? ORDER BY s LIMIT 5"


def _sources() -> tuple[list[list[str]], str]:
    files = sorted(KNOWLEDGE_DIR.rglob("*.md")) if KNOWLEDGE_DIR.is_dir() else []
    origin = str(KNOWLEDGE_DIR)
    if not files:
        files = sorted(p for p in REPO.rglob("*.md") if ".venv" not in p.parts)
        origin = "the repository's Markdown (the shared knowledge pages were absent)"
    pages = [_WORD.findall(p.read_text(errors="replace")) for p in files]
    return [w for w in pages if len(w) >= 20], origin


def generate_pages(n: int, *, seed: int = 7) -> tuple[list[tuple[str, str]], list[str], str]:
    """Generate ``n`` (title, body) pages by shuffling the words of the knowledge pages.

    Returns:
        The pages, the vocabulary (distinct words of 4+ characters, sorted) and where the words came from.
    """
    sources, origin = _sources()
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = list(rng.choice(sources))
        rng.shuffle(words)
        size = rng.randint(60, 240)
        body = " ".join(words[:size])
        title = " ".join(words[size : size + rng.randint(3, 6)]) or " ".join(words[:3])
        out.append((title, body))
    vocab = sorted({w.lower() for s in sources for w in s if len(w) >= 4 and not w.isdigit()})
    return out, vocab, origin


def _load(conn: Connection, rows: list[tuple[str, str, str, int]], now: int) -> None:
    dbapi: Any = conn.connection.dbapi_connection
    dbapi.executemany(
        "INSERT INTO pages (id, container, address, title, body, edit_number, status, author, author_kind, "
        "created_at, updated_at, version, scoped_through, search_shard) "
        "VALUES (?, ?, ?, ?, ?, 1, 'published', 'bench', 'operator', ?, ?, 1, 0, ?)",
        [(pid, PROJECT, f"bench-{pid}", t, b, now, now, estate.search_bucket(pid)) for pid, t, b, _ in rows],
    )
    dbapi.executemany(
        "INSERT INTO pages_fts (page_id, container, title, body) VALUES (?, ?, ?, ?)",
        [(pid, PROJECT, t, b) for pid, t, b, _ in rows],
    )


async def _measure(
    url: str, store: Path, pages: int, queries: int, warmup: int
) -> tuple[list[float], list[float], dict[str, Any]]:
    nc = await nats.connect(url)
    est = await estate.open_estate(nc.jetstream(timeout=10.0), node_id="d1", store_dir=store, replicas=1)
    try:
        await est.wait_level(30)
        for op in ("project.upsert", "space.upsert"):
            await est.service.serve(
                estate.Call(
                    op=op,
                    args={"key": PROJECT, "name": PROJECT},
                    op_id=estate.derive_op_id(f"seed-{op}", PROJECT),
                )
            )
        t0 = time.monotonic()
        generated, vocab, origin = generate_pages(pages)
        now = int(time.time() * 1000)
        chunk = 5000
        for start in range(0, pages, chunk):
            part = [
                (f"bench{start + i:07d}", t, b, 0)
                for i, (t, b) in enumerate(generated[start : start + chunk])
            ]
            await est.store.write(lambda conn, part=part: _load(conn, part, now))  # type: ignore[misc]
        del generated
        load_s = time.monotonic() - t0
        router = EstateRouter(nc, None, node_id="d1", local=lambda: est.service)
        db = sqlite3.connect(f"file:{store / 'estate.db'}?mode=ro", uri=True, check_same_thread=False)
        rng = random.Random(70)
        fig: list[float] = []
        floor: list[float] = []
        hits = 0
        try:
            for i in range(warmup + queries):
                words = rng.sample(vocab, 3)
                match = " OR ".join(f'"{w}"' for w in words)
                t1 = time.perf_counter()
                raw = db.execute(_FLOOR_SQL, (match,)).fetchall()
                t2 = time.perf_counter()
                res = await router.search_knowledge(" ".join(words))
                t3 = time.perf_counter()
                data = res["data"]
                if data.get("failed"):
                    raise RuntimeError(f"search failed: {data.get('sentence')}")
                if len(data["hits"]) != len(raw):
                    raise RuntimeError(
                        f"{words}: the estate found {len(data['hits'])} hits, raw FTS5 {len(raw)}"
                    )
                if i >= warmup:
                    fig.append(t3 - t2)
                    floor.append(t2 - t1)
                    hits += len(raw)
        finally:
            db.close()
        size = (store / "estate.db").stat().st_size
        info = {
            "load_seconds": round(load_s, 1),
            "words_from": origin,
            "vocabulary": len(vocab),
            "estate_db_mb": round(size / 1e6, 1),
            "mean_hits": round(hits / max(1, queries), 2),
        }
        return fig, floor, info
    finally:
        await est.close()
        await nc.close()


def run(ctx: Ctx) -> list[Row]:
    """Measure rows 7a (10 000 pages) and, in a full run, 7b (100 000 pages)."""
    rows: list[Row] = []
    sizes = [10_000] if ctx.quick else [10_000, 100_000]
    queries, warmup = ctx.n(60, 400), ctx.n(5, 20)
    for letter, pages in zip("ab", sizes, strict=False):
        label = f"7{letter} knowledge search, {pages:,} generated pages"
        params: dict[str, Any] = {
            "pages": pages,
            "queries": queries,
            "words_per_query": 3,
            "limit": 5,
            "in_process": True,
        }
        ctx.say(f"figure 7: generating and loading {pages:,} pages, then {queries} searches")
        try:
            with contextlib.ExitStack() as stack:
                srv = nats_server(stack, ctx.sub(f"nats-{pages}"))
                fig, floor, info = asyncio.run(
                    _measure(srv.url, ctx.sub(f"store-{pages}"), pages, queries, warmup)
                )
        except Exception as e:  # noqa: BLE001
            rows.append(failed(label, "ms", f"{type(e).__name__}: {e}", params))
            continue
        params.update(info)
        rows.append(
            row_from(
                label,
                "ms",
                [x * 1000 for x in fig],
                "raw FTS5 bm25 query, same db",
                [x * 1000 for x in floor],
                parameters=params,
            )
        )
    return rows
