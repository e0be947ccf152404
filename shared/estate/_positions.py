"""The position heartbeat (ES-23, ES-24): every 10 s each data node says how far its copy is.

Per domain, into the KV bucket ``crewlet_positions`` under ``<domain>.<node_id>``: ``seq``
(checkpoint), ``applied_through``, ``generation``, ``stream_created_at``, ``checkpoint_stored_at``,
``log_diverged`` and the log's last sequence as this node read it. A node writes its row at start
(position zero before its first apply), then every beat. The same tick refreshes each applier's idea
of the log's end and evaluates ``apply_lag`` (more than a minute behind the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from shared import logs

from ._alarms import Alarms
from ._applier import Applier
from ._errors import Refused
from ._ids import GENERATION
from ._log import StateLog
from ._store import EstateStore

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
        for domain, a in self._appliers.items():
            with contextlib.suppress(Refused):
                _first, last = await self._log.head(domain)
                a.note_log_end(last)
            behind_for = time.monotonic() - a.behind_since if a.behind_since is not None and a.lag else 0.0
            self.alarms.set(
                "apply_lag",
                behind_for > 60.0,
                domain=domain,
                lag_records=a.lag,
                behind_seconds=round(behind_for, 1),
            )
            cp = await self._store.checkpoint(domain)
            row = {
                "node": self._node,
                "domain": domain,
                "stream": a.stream,
                "seq": a.applied,
                "applied_through": a.applied,
                "generation": GENERATION,
                "stream_created_at": cp.stream_created_at if cp else 0,
                "checkpoint_stored_at": cp.checkpoint_stored_at if cp else 0,
                "log_diverged": False,
                "log_last": a.log_last,
                "state": a.copy_state(),
                "at": int(time.time() * 1_000_000),
            }
            try:
                kv = await self._bucket_kv()
                await kv.put(f"{domain}.{self._node}", json.dumps(row).encode())
            except (TimeoutError, nats.errors.Error, nats.js.errors.Error) as e:
                _log.warning("statelog_position_unpublished", domain=domain, error=f"{type(e).__name__}: {e}")

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
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
