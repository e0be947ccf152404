"""Figure 15: knowledge found by meaning (AG-10..AG-12) [floors: raw FTS5 + a raw numpy scan; the model's own batch call].

What is measured (in-process, one nats-server):

- **15a/b/c hybrid search at 1 000 / 10 000 (/ 100 000 in a full run) pages**: the pages of figure 7
  (word-shuffled knowledge pages) bulk-loaded into the estate file (``pages``, ``pages_fts``) with
  one vector each in ``vector_windows`` / ``vector_codes`` (the rows the ``vector_put`` applier
  writes; the vectors are ``scripted-hash-256`` of the page text, so the bench needs no model),
  then ``EstateRouter.search_knowledge(mode=hybrid)`` through the local service: the query embedded
  by an in-process hashing embedder (no HTTP), BM25 top 150 in the ranking classes, the two-stage
  vector scan (sign codes from the cache, exact rerank of 1 200), RRF, the hits read with
  snippets. Floor, interleaved query by query: the raw FTS5 ``bm25()`` query (``LIMIT 150``) plus a
  raw numpy exact scan of the same vectors held as one float32 matrix in memory (``mat @ q``,
  ``argpartition`` 150): the two searches with no ranking classes, no cache check, no fusion.
- **15d embedding throughput (windows/s)**: the duty's path with ``type: local`` (``windows_of``,
  whole pages grouped into batches of ≤ 128 windows, ``LocalEmbedder.embed`` on a worker thread,
  each batch's ``vector_put`` records appended to ``CREWLET_TRACKER_VECTORS`` all in flight at once) beside the model's own batch call
  (``WordLlama.embed`` of the same texts, batch 128, on the caller's thread).
- **15e RSS**: a Python process that imported the node's modules, with the local model loaded and
  used once beside one without (``VmRSS`` after a collection, MB).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nats
import numpy as np
from sqlalchemy import Connection

from shared import estate
from shared.estate.domains.vectors import sign_code, vector_record, windows_of
from shared.estate.log import StateLog
from shared.providers import Embedder, LocalEmbedder, hash_vector
from shared.router import EstateRouter

from ._ctx import Ctx
from ._env import PROJECT, nats_server
from ._result import Row, failed, row_from
from .fig7_search import _FLOOR_SQL, _load, generate_pages

__all__ = ["run"]

_FTS150 = _FLOOR_SQL.replace("LIMIT 5", "LIMIT 150")


class _HashEmbedder(Embedder):
    provider, model, dims = "bench", "scripted-hash-256", 256

    async def embed_batch(self, texts: list[str]) -> np.ndarray:
        return np.asarray([hash_vector(t) for t in texts], dtype=np.float32)


def _load_vectors(conn: Connection, rows: list[tuple[str, np.ndarray]]) -> None:
    dbapi: Any = conn.connection.dbapi_connection
    windows, codes = [], []
    for i, (pid, v) in enumerate(rows):
        subject = f"crewlet.statelog.vectors.page.{pid}.0"
        shard = estate.search_bucket(pid)
        windows.append(
            (subject, "page", pid, 0, 1, "scripted-hash-256", 256, 1, shard, v.astype("<f4").tobytes(), i + 1)
        )
        codes.append((subject, "page", pid, "scripted-hash-256", 256, shard, sign_code(v), i + 1))
    dbapi.executemany(
        "INSERT INTO vector_windows (subject, source_kind, source_id, window, windows, model, dims, edit_number, "
        "shard, vector, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        windows,
    )
    dbapi.executemany(
        "INSERT INTO vector_codes (subject, source_kind, source_id, model, dims, shard, code, seq) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        codes,
    )


async def _search(
    url: str, store: Path, pages: int, queries: int, warmup: int
) -> tuple[list[float], list[float], dict[str, Any]]:
    nc = await nats.connect(url)
    est = await estate.open_estate(nc.jetstream(timeout=10.0), node_id="d1", store_dir=store, replicas=1)
    try:
        await est.wait_level(30)
        await est.service.serve(estate.Call(op="space.upsert", args={"key": PROJECT, "name": PROJECT},
                                            op_id=estate.derive_op_id("seed-space", PROJECT)))  # fmt: skip
        generated, vocab, origin = generate_pages(pages)
        now = int(time.time() * 1000)
        mat = np.zeros((pages, 256), dtype=np.float32)
        for start in range(0, pages, 5000):
            part = [
                (f"bench{start + i:07d}", t, b, 0) for i, (t, b) in enumerate(generated[start : start + 5000])
            ]
            vecs = [(pid, np.asarray(hash_vector(f"{t}\n{b}"), dtype=np.float32)) for pid, t, b, _ in part]
            for j, (_, v) in enumerate(vecs):
                mat[start + j] = v
            await est.store.write(lambda conn, part=part: _load(conn, part, now))  # type: ignore[misc]
            await est.store.write(lambda conn, vecs=vecs: _load_vectors(conn, vecs))  # type: ignore[misc]
        router = EstateRouter(nc, None, node_id="d1", local=lambda: est.service)
        emb = _HashEmbedder()
        db = sqlite3.connect(f"file:{store / 'estate.db'}?mode=ro", uri=True, check_same_thread=False)
        rng = random.Random(150)
        fig: list[float] = []
        floor: list[float] = []
        try:
            for i in range(warmup + queries):
                words = rng.sample(vocab, 3)
                q = " ".join(words)
                t1 = time.perf_counter()
                db.execute(_FTS150, (" OR ".join(f'"{w}"' for w in words),)).fetchall()
                qv = np.asarray(hash_vector(q), dtype=np.float32)
                s = mat @ qv
                np.argpartition(-s, min(150, pages - 1))[:150]
                t2 = time.perf_counter()
                res = await router.search_knowledge(q, mode="hybrid", embedder=emb)
                t3 = time.perf_counter()
                if res["data"].get("mode_used") != "hybrid":
                    raise RuntimeError(f"not a hybrid answer: {res['data'].get('sentence')}")
                if i >= warmup:
                    fig.append(t3 - t2)
                    floor.append(t2 - t1)
        finally:
            db.close()
        return fig, floor, {"words_from": origin, "vectors_mb_in_floor_matrix": round(mat.nbytes / 1e6, 1)}
    finally:
        await est.close()
        await nc.close()


async def _throughput(url: str, texts: list[tuple[str, str]]) -> tuple[float, float, int]:
    nc = await nats.connect(url)
    try:
        log = StateLog(nc.jetstream(timeout=10.0), replicas=1)
        await log.provision()
        emb = LocalEmbedder("wordllama/l2_supercat_256")
        model = emb.load()
        windows = [w for t, b in texts for w in windows_of(t, b)[0]]
        model.embed(windows[:128], norm=True)  # warm
        t0 = time.perf_counter()
        for i in range(0, len(windows), 128):
            model.embed(windows[i : i + 128], norm=True)
        raw = time.perf_counter() - t0
        t1 = time.perf_counter()
        batch: list[tuple[int, list[str]]] = []
        for n, (t, b) in enumerate([*texts, ("", "")]):
            ws = windows_of(t, b)[0] if n < len(texts) else []
            if batch and (not ws or sum(len(x) for _, x in batch) + len(ws) > 128):
                vecs = await emb.embed([w for _, x in batch for w in x])
                recs, i = [], 0
                for src, x in batch:
                    for w in range(len(x)):
                        recs.append(vector_record(source_kind="page", source_id=f"p{src}", window=w, writer="bench",
                                                  at=0, vector=vecs[i], windows=len(x), model=emb.model,
                                                  edit_number=1, shard=0))  # fmt: skip
                        i += 1
                await asyncio.gather(*(log.append(r, expect=None) for r in recs))
                batch = []
            if ws:
                batch.append((n, ws))
        duty = time.perf_counter() - t1
        return len(windows) / duty, len(windows) / raw, len(windows)
    finally:
        await nc.close()


def _rss(load: bool) -> float:
    code = (
        "import gc, re, services.workers.app, shared.providers as p\n"
        + (
            "e = p.LocalEmbedder('wordllama/l2_supercat_256'); e.load().embed(['warm up'], norm=True)\n"
            if load
            else ""
        )
        + "gc.collect()\n"
        + "print(int(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) / 1024)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return float(out.stdout.strip())


def run(ctx: Ctx) -> list[Row]:
    """Rows 15a/b(/c) hybrid search, 15d embedding throughput, 15e RSS with the local model."""
    rows: list[Row] = []
    sizes = [1_000, 10_000] if ctx.quick else [1_000, 10_000, 100_000]
    queries, warmup = ctx.n(40, 300), ctx.n(5, 20)
    for letter, pages in zip("abc", sizes, strict=False):
        label = f"15{letter} hybrid search (RRF), {pages:,} pages"
        params: dict[str, Any] = {
            "pages": pages,
            "queries": queries,
            "limit": 5,
            "depth": 150,
            "in_process": True,
        }
        ctx.say(f"figure 15: {pages:,} pages with vectors, then {queries} hybrid searches")
        try:
            with contextlib.ExitStack() as stack:
                srv = nats_server(stack, ctx.sub(f"nats-15-{pages}"))
                fig, floor, info = asyncio.run(
                    _search(srv.url, ctx.sub(f"store-15-{pages}"), pages, queries, warmup)
                )
        except Exception as e:  # noqa: BLE001
            rows.append(failed(label, "ms", f"{type(e).__name__}: {e}", params))
            continue
        params.update(info)
        rows.append(row_from(label, "ms", [x * 1000 for x in fig], "raw FTS5 top 150 + raw numpy exact scan",
                             [x * 1000 for x in floor], parameters=params))  # fmt: skip
    label = "15d embedding throughput, type local (windows/s)"
    texts, _, _ = generate_pages(ctx.n(200, 1000))
    try:
        with contextlib.ExitStack() as stack:
            srv = nats_server(stack, ctx.sub("nats-15d"))
            duty, raw, n = asyncio.run(_throughput(srv.url, texts))
        rows.append(row_from(label, "windows/s", [duty], "WordLlama.embed batch 128, same texts", [raw],
                             parameters={"windows": n, "batch": 128}))  # fmt: skip
    except Exception as e:  # noqa: BLE001
        rows.append(failed(label, "windows/s", f"{type(e).__name__}: {e}", {}))
    try:
        rows.append(row_from("15e RSS with the local model loaded (MB)", "MB", [_rss(True)],
                             "the same process without it", [_rss(False)], parameters={}))  # fmt: skip
    except Exception as e:  # noqa: BLE001
        rows.append(failed("15e RSS with the local model loaded (MB)", "MB", f"{type(e).__name__}: {e}", {}))
    return rows
