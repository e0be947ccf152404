"""The position heartbeat (ES-23, ES-24): every 10 s each data node says how far its copy is.

Per domain, into the KV bucket ``crewlet_positions`` under ``<domain>.<node_id>``: ``seq``
(checkpoint), ``applied_through``, ``generation``, ``stream_created_at``, ``checkpoint_stored_at``,
``log_diverged``, the log's first and last sequence as this node read it (``log_first``, ``log_last``)
and its snapshot artefact (``snapshot``: ``{seq, taken_at, sha256, bytes}`` or null; ``snapshot_skip``:
why it is not refreshing one, ES-54). A node writes its row at start (position zero before its first
apply), then every beat and right after taking a snapshot. The same tick refreshes each applier's
idea of the log's end, evaluates ``apply_lag`` (more than a minute behind the log) and hands the
log heads to :attr:`PositionBeat.on_heads` (the catch-up's below-the-log check, ES-58).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from shared import logs

from .._alarms import Alarms
from .._errors import Refused
from .._tasks import stop_task
from ..store._storage import observe_storage
from ..store._store import EstateStore
from ._applier import Applier
from ._gates import evicted_since
from ._ids import GENERATION
from ._log import StateLog

__all__ = ["HEARTBEAT", "PositionBeat"]

_log = logs.get("statelog")
HEARTBEAT = 10.0
"""Seconds between position reports (ES-23)."""


class PositionBeat:
    """Publishes this node's positions and keeps the lag alarms.

    Args:
        js: The node's JetStream context.
        node_id: This node's id.
        appliers: Domain → applier.
        log: The state logs (to read each log's end).
        store: The estate file (checkpoint fields).
        bucket: The positions bucket name (``<prefix>_positions``).
        replicas: The bucket's replicas when it has to be created.
        interval: Seconds between beats.
    """

    def __init__(
        self,
        js: JetStreamContext,
        *,
        node_id: str,
        appliers: dict[str, Applier],
        log: StateLog,
        store: EstateStore,
        bucket: str = "crewlet_positions",
        replicas: int = 1,
        interval: float = HEARTBEAT,
    ) -> None:
        self._js = js
        self._node = node_id
        self._appliers = appliers
        self._log = log
        self._store = store
        self._bucket = bucket
        self._replicas = replicas
        self._interval = interval
        self._kv: KeyValue | None = None
        self._task: asyncio.Task[None] | None = None
        self.alarms = Alarms()
        self.snapshot_fields: Callable[[str], dict[str, Any]] | None = None
        """``domain -> {"snapshot": {...} | None, "snapshot_skip": str}`` (the snapshot keeper, ES-54)."""
        self.on_heads: Callable[[dict[str, tuple[int, int]]], Awaitable[None]] | None = None
        """Awaited each beat with ``domain -> (first_seq, last_seq)`` as read (the catch-up, ES-58)."""

    async def _bucket_kv(self) -> KeyValue:
        if self._kv is None:
            try:
                self._kv = await self._js.key_value(self._bucket)
            except nats.js.errors.BucketNotFoundError:
                self._kv = await self._js.create_key_value(
                    bucket=self._bucket, replicas=self._replicas, history=1, direct=True
                )
        return self._kv

    async def beat(self) -> None:
        """Report every domain once and evaluate ``apply_lag``; failures are logged, never raised."""
        heads: dict[str, tuple[int, int]] = {}
        evicted: dict[str, dict[str, int]] | None = None
        with contextlib.suppress(Exception):  # a file being replaced keeps the last answer (ES-58)
            evicted = await self._store.read(evicted_since)
        lagging: dict[str, Any] = {}
        for domain, a in self._appliers.items():
            if evicted is not None:
                was, a.evicted = a.evicted, self._node in evicted.get(domain, {})
                if a.evicted != was:
                    _log.warning(
                        "statelog_copy_evicted" if a.evicted else "statelog_copy_readmitted",
                        domain=domain,
                        node=self._node,
                    )
            first = 0
            with contextlib.suppress(Refused):
                first, last = await self._log.head(domain)
                heads[domain] = (first, last)
                a.note_log_end(last)
            behind_for = time.monotonic() - a.behind_since if a.behind_since is not None and a.lag else 0.0
            if behind_for > 60.0:
                lagging[domain] = {"lag_records": a.lag, "behind_seconds": round(behind_for, 1)}
            cp = None
            with contextlib.suppress(Exception):  # a file being replaced or lost still reports (ES-58)
                cp = await self._store.checkpoint(domain)
            row: dict[str, Any] = {
                "node": self._node,
                "domain": domain,
                "stream": a.stream,
                "seq": a.applied,
                "applied_through": a.applied,
                "generation": GENERATION,
                "stream_created_at": cp.stream_created_at if cp else 0,
                "checkpoint_stored_at": cp.checkpoint_stored_at if cp else 0,
                "log_diverged": False,
                "log_first": first,
                "log_last": a.log_last,
                "state": a.copy_state(),
                "snapshot": None,
                "snapshot_skip": "",
                **observe_storage(self._store, self.alarms),  # store_bytes, wal_bytes; wal_large (H4)
                "at": int(time.time() * 1_000_000),
            }
            if self.snapshot_fields is not None:
                row.update(self.snapshot_fields(domain))
            try:
                kv = await self._bucket_kv()
                await kv.put(f"{domain}.{self._node}", json.dumps(row).encode())
            except (TimeoutError, nats.errors.Error, nats.js.errors.Error) as e:
                _log.warning("statelog_position_unpublished", domain=domain, error=f"{type(e).__name__}: {e}")

        # one alarm for the node: on while any domain is a minute behind (ES-24)
        self.alarms.set("apply_lag", bool(lagging), domains=lagging)
        if self.on_heads is not None:
            try:
                await self.on_heads(heads)
            except Exception as e:  # noqa: BLE001 - the heartbeat is mandatory (ES-23): never let it die
                _log.warning("statelog_heads_hook_failed", error=f"{type(e).__name__}: {e}")

    async def nodes(self) -> set[str] | None:
        """Return the node ids holding a row in the register (any domain), or None when unreadable."""
        try:
            kv = await self._bucket_kv()
            keys = await kv.keys()
        except nats.js.errors.NoKeysError:
            return set()
        except (TimeoutError, nats.errors.Error, nats.js.errors.Error):
            return None
        return {k.split(".", 1)[1] for k in keys if "." in k}

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.beat()

    async def start(self) -> None:
        """Publish once now (ES-23: counted from the moment it starts) and every ``interval`` s after."""
        await self.beat()
        self._task = asyncio.create_task(self._loop(), name="estate-positions")

    async def stop(self) -> None:
        """Stop beating."""
        if self._task is not None:
            await stop_task(self._task, name="estate-heartbeat")
            self._task = None
