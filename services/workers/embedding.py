"""The embedding duty (AG-11, ES-67): keeps every published page's vectors current.

Runs on the node holding the ``worker:embedding`` lease (TTL the seat lease TTL, 45 s). The loop
beats every :data:`HEARTBEAT` seconds (renewing the lease) and runs a pass when
:func:`tick_seconds` (60 s; ``CREWLET_EMBEDDING_TICK_SECONDS`` in tests) passed since the last, or
the back-off after a failure (doubling to :data:`MAX_BACKOFF`, 10 min). One pass:

1. reads ``vectors.pending`` through the router (changed pages: no window 0 of this model and width,
   or of another ``edit_number``; windows whose page is gone; coverage);
2. publishes a ``vector_withdraw`` for each gone window (≤ 1 024, no provider call);
3. cuts each changed page into windows (4 KB, title repeated, 512 B overlap, ≤ 64: the rest counted
   in ``crewlet_embedding_truncated_total``), groups whole pages into batches of ≤ 128 windows and
   embeds at most :data:`CALLS_PER_TICK` (8) batches; each batch's ``vector_put`` records go to the
   compacted log all in flight at once, and the windows a page no longer has are withdrawn;
4. sets ``crewlet_tracker_vector_coverage`` (published pages with current vectors / all, 0..1) and
   the ``recall_below_floor`` alarm while it is under 0.95.

A provider error ends the pass (``embedding_batch_failed{status}``; a batch not mapping one-to-one:
``embedding_batch_refused``) and doubles the wait. No provider configured: nothing to do.
Pages only: work items are not embedded yet (their lexical search does not exist either).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import numpy as np
from prometheus_client import REGISTRY, Counter, Gauge

from shared import logs
from shared.estate._alarms import Alarms
from shared.estate.domains.vectors import vector_record, windows_of
from shared.estate.log import StateLog
from shared.providers import BatchRefused, Embedder, LLMError
from shared.router import open_router
from shared.runtime import NodeContext, node_embedder

__all__ = ["CALLS_PER_TICK", "HEARTBEAT", "MAX_BACKOFF", "EmbeddingDuty", "tick_seconds"]

HEARTBEAT = 15.0
"""Seconds between the duty loop's beats (each renews ``worker:embedding``; under its 45 s TTL)."""
CALLS_PER_TICK = 8
"""Provider calls one pass makes at most (ES-67)."""
BATCH = 128
"""Windows per call at most (ES-67, AG-10)."""
MAX_BACKOFF = 600.0
"""The longest wait after failures (AG-11: doubling to 10 min)."""
FLOOR = 0.95
"""``recall_below_floor`` fires under this coverage (ES-67)."""

_log = logs.get("embedding")


def _metric(kind: type[Any], name: str, doc: str, labels: tuple[str, ...] = ()) -> Any:
    existing = getattr(REGISTRY, "_names_to_collectors", {}).get(name)
    return existing if isinstance(existing, kind) else kind(name, doc, list(labels))


_COVERAGE = _metric(
    Gauge, "crewlet_tracker_vector_coverage", "Share of published pages with current vectors (ES-67)."
)
_TRUNCATED = _metric(
    Counter, "crewlet_embedding_truncated", "Windows not embedded: beyond 64 per source (AG-11)."
)


def tick_seconds() -> float:
    """Seconds between passes: 60, or ``CREWLET_EMBEDDING_TICK_SECONDS``."""
    try:
        return max(0.5, float(os.environ.get("CREWLET_EMBEDDING_TICK_SECONDS", "60")))
    except ValueError:
        return 60.0


class EmbeddingDuty:
    """The embedding duty's state on the node holding it (AG-11).

    Args:
        ctx: The node's context (router, broker link, applied company).
        alarms: Where ``recall_below_floor`` is raised.
    """

    def __init__(self, ctx: NodeContext, alarms: Alarms) -> None:
        self.ctx = ctx
        self.alarms = alarms
        self.wait = tick_seconds()
        self.next_at = 0.0
        self.passes = 0

    async def tick(self) -> None:
        """Run a pass when one is due; never raises for a provider failure (it backs off)."""
        if time.monotonic() < self.next_at or self.ctx.link is None or self.ctx.draining:
            return
        embedder = node_embedder(self.ctx)
        if embedder is None:
            return
        try:
            await self.run_pass(embedder)
            self.wait = tick_seconds()
        except BatchRefused as e:
            _log.warning("embedding_batch_refused", error=str(e))
            self.wait = min(MAX_BACKOFF, self.wait * 2)
        except LLMError as e:
            _log.warning("embedding_batch_failed", status=e.status, kind=e.kind, error=str(e))
            self.wait = min(MAX_BACKOFF, self.wait * 2)
        finally:
            self.next_at = time.monotonic() + self.wait
            self.passes += 1

    async def run_pass(self, embedder: Embedder) -> dict[str, int]:
        """One pass (see the module docstring); returns ``{calls, windows, withdrawn}``.

        Raises:
            LLMError: a provider call failed (what was published before it stays).
        """
        ctx = self.ctx
        assert ctx.link is not None
        log = StateLog(ctx.link.js, replicas=ctx.cfg.stream.replicas)
        data = (await open_router(ctx).vectors_pending(embedder.model, embedder.dims))["data"]
        now = int(time.time() * 1_000_000)
        withdrawn = 0
        for w in data.get("withdraw") or []:
            rec = vector_record(
                source_kind=w["source_kind"], source_id=w["source_id"], window=int(w["window"]),
                writer=ctx.node_id, at=now,
            )  # fmt: skip
            await log.append(rec, expect=None)
            withdrawn += 1
        cov = data.get("coverage") or {}
        current, total = int(cov.get("current") or 0), int(cov.get("total") or 0)
        calls = windows = 0
        batch: list[tuple[dict[str, Any], list[str]]] = []
        for src in data.get("embed") or []:
            texts, _ = windows_of(str(src["title"]), str(src["body"]))
            if batch and sum(len(t) for _, t in batch) + len(texts) > BATCH:
                if calls == CALLS_PER_TICK:
                    break
                windows += await self._embed(embedder, log, batch)
                current += len(batch)
                calls += 1
                batch = []
            batch.append((src, texts))
        if batch and calls < CALLS_PER_TICK:
            windows += await self._embed(embedder, log, batch)
            current += len(batch)
            calls += 1
        self._coverage(min(current, total), total)
        _log.info(
            "embedding_pass", calls=calls, windows=windows, withdrawn=withdrawn, current=current, total=total
        )
        return {"calls": calls, "windows": windows, "withdrawn": withdrawn}

    async def _embed(
        self, embedder: Embedder, log: StateLog, batch: list[tuple[dict[str, Any], list[str]]]
    ) -> int:
        """Embed whole sources' windows in one call (≤ 128 inputs; one source may bring up to 64) and publish."""
        texts = [t for _, ts in batch for t in ts]
        vecs: np.ndarray = await embedder.embed(texts)
        now = int(time.time() * 1_000_000)
        recs = []
        i = 0
        for src, ts in batch:
            for w in range(len(ts)):
                recs.append(vector_record(
                    source_kind="page", source_id=str(src["source_id"]), window=w, writer=self.ctx.node_id,
                    at=now, vector=vecs[i], windows=len(ts), model=embedder.model,
                    edit_number=int(src["edit_number"]), shard=int(src["shard"]),
                ))  # fmt: skip
                i += 1
            for w in range(len(ts), int(src.get("had") or 0)):  # windows the page no longer has
                recs.append(vector_record(
                    source_kind="page", source_id=str(src["source_id"]), window=w, writer=self.ctx.node_id, at=now
                ))  # fmt: skip
            if int(src.get("truncated") or 0):
                _TRUNCATED.inc(int(src["truncated"]))
        await asyncio.gather(
            *(log.append(r, expect=None) for r in recs)
        )  # one batch's windows in flight at once
        return len(texts)

    def _coverage(self, current: int, total: int) -> None:
        fraction = current / total if total else 1.0
        _COVERAGE.set(fraction)
        self.alarms.set("recall_below_floor", fraction < FLOOR, coverage=round(fraction, 4), total=total)
