"""Snapshots of the estate file (ES-53, ES-54, ES-55, ES-59).

Every data node keeps **one** artefact in ``store.snapshot_dir``: a ``VACUUM INTO`` copy of its
estate file (``estate-snapshot-<sha16>.db``, no WAL, no node-local data: the node-local tables live
in ``node.db``) and ``manifest.json`` naming it. A snapshot is taken like this (:func:`take_snapshot`):

1. ``VACUUM INTO`` a temporary file inside the snapshot directory (a read transaction on the live
   file: writers go on);
2. reopen the copy, ``PRAGMA integrity_check``, and read every log's position **out of the copy**
   (its ``statelog_checkpoint`` rows, never the live applier's numbers) and its schema;
3. fsync it and take its sha256;
4. write the manifest beside it, fsync, and ``rename`` it over ``manifest.json`` (the switch is that
   one atomic rename); only then delete the previous artefact's file.

The manifest (``manifest.json``, JSON)::

    {"format": 1, "node": "n1", "taken_at": <unix µs>, "file": "estate-snapshot-<sha16>.db",
     "bytes": 123456, "sha256": "<hex>", "build": "0.1.0", "record_version_read": 14,
     "positions": {"tracker": {"stream": "CREWLET_TRACKER_LOG", "generation": 1, "seq": 812,
                               "applied_through": 812, "max_record_version": 1,
                               "stream_created_at": <µs>}, "pages": {...}},
     "migrations": {"<table>": ["<column>", ...], ...}}

``migrations`` is the copy's schema (every ordinary table and its columns, FTS tables left out):
a joiner refuses an artefact naming a table or column its build lacks (ES-56).

:class:`SnapshotKeeper` is the per-node loop (ES-53/54/55): no more often than ``interval``
(``stream.tracker_retention.snapshot_interval``); a declined attempt names its reason and is retried
after ``retry`` seconds (30): ``sole_node`` (no other node in the positions register),
``unhydrated`` (a copy never reached its log's end), ``lagging`` (> 1 000 records behind),
``out_of_service`` is reported as ``failed``, ``insufficient_space`` (free space on the snapshot
volume below 1.2 × the estate file + WAL; raises ``volume_low``), ``failed`` (the copy or its check
failed). While no artefact exists on disk a change of reason logs ``statelog_no_snapshot_yet`` (WARN)
once; ``sole_node`` logs ``statelog_snapshot_sole_node`` once at INFO instead. After a snapshot the
positions are published at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from shared import logs

from .._alarms import Alarms
from .._tasks import stop_task
from ..log._applier import LAGGING_RECORDS, Applier
from ..log._record import RECORD_VERSION_READ
from ..store._store import EstateStore
from ._manifest import (
    _FORMAT,
    MANIFEST,
    SnapshotFailed,
    _fsync_path,
    build_schema,
    build_version,
    check_copy,
    copy_positions,
    copy_schema,
    file_sha256,
    incompatibility,
    load_manifest,
)

__all__ = [
    "MANIFEST",
    "RETRY_AFTER",
    "SPACE_FACTOR",
    "SnapshotFailed",
    "SnapshotKeeper",
    "build_schema",
    "build_version",
    "copy_positions",
    "copy_schema",
    "file_sha256",
    "incompatibility",
    "load_manifest",
    "take_snapshot",
]

_log = logs.get("statelog")

RETRY_AFTER = 30.0
"""Seconds before a declined snapshot is tried again (ES-54)."""
SPACE_FACTOR = 1.2
"""A snapshot needs this many times the estate file + WAL free on its volume (ES-59)."""


def _remove_others(snapshot_dir: Path, keep: str) -> None:
    for p in snapshot_dir.iterdir():
        if p.name in (keep, MANIFEST):
            continue
        if p.name.startswith("estate-snapshot") or p.name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                p.unlink()


def take_snapshot(live: Path, snapshot_dir: Path, *, node_id: str) -> dict[str, Any]:
    """Take one snapshot of the estate file ``live`` into ``snapshot_dir`` (ES-53); blocking.

    Returns:
        The new manifest (see the module docstring); it is on disk and the previous artefact is gone.

    Raises:
        SnapshotFailed: the copy, its check or a write failed; the previous artefact is untouched and
            the partial file is deleted.
    """
    snapshot_dir.mkdir(parents=True, exist_ok=True)
    tmp = snapshot_dir / f"estate-snapshot.{os.getpid()}.{time.monotonic_ns()}.db.tmp"
    taken_at = int(time.time() * 1_000_000)
    try:
        src = sqlite3.connect(str(live), isolation_level=None, timeout=30.0)
        try:
            src.execute("PRAGMA busy_timeout=30000")
            src.execute("VACUUM INTO ?", (str(tmp),))
        finally:
            src.close()
        positions, schema = check_copy(tmp)
        _fsync_path(tmp)
        sha = file_sha256(tmp)
        name = f"estate-snapshot-{sha[:16]}.db"
        final = snapshot_dir / name
        os.replace(tmp, final)
        manifest = {
            "format": _FORMAT,
            "node": node_id,
            "taken_at": taken_at,
            "file": name,
            "bytes": final.stat().st_size,
            "sha256": sha,
            "build": build_version(),
            "record_version_read": RECORD_VERSION_READ,
            "positions": positions,
            "migrations": schema,
        }
        mtmp = snapshot_dir / f"{MANIFEST}.{os.getpid()}.tmp"
        with mtmp.open("w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(mtmp, snapshot_dir / MANIFEST)
        with contextlib.suppress(OSError):
            _fsync_path(snapshot_dir)
    except (sqlite3.Error, OSError) as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise SnapshotFailed(f"{type(e).__name__}: {e}") from None
    except SnapshotFailed:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _remove_others(snapshot_dir, name)
    return manifest


def free_bytes(path: Path) -> int:
    """Free bytes on the volume holding ``path`` (its nearest existing parent)."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


class SnapshotKeeper:
    """One data node's snapshot loop (ES-53, ES-54, ES-55).

    Args:
        node_id: This node's id.
        store: The estate file.
        appliers: Domain → applier (hydration and lag are read from them).
        snapshot_dir: ``store.snapshot_dir``.
        interval: Seconds: at most one snapshot per interval (``snapshot_interval``, default 24 h).
        retry: Seconds before a declined attempt is tried again (30).
        peers: Awaitable returning the node ids in the positions register (None when unreadable);
            no id but this node's → ``sole_node``. None: never ``sole_node``.
        alarms: Where ``volume_low`` is raised (the heartbeat's).
        on_taken: Awaited after a snapshot (publish positions at once, ES-23).
        free_space: Seam: ``path -> free bytes`` on that volume (default :func:`free_bytes`).

    Attributes:
        skip_reason: The last attempt's reason, ``""`` after a success or before any attempt.
    """

    def __init__(
        self,
        *,
        node_id: str,
        store: EstateStore,
        appliers: dict[str, Applier],
        snapshot_dir: Path,
        interval: float = 86_400.0,
        retry: float = RETRY_AFTER,
        peers: Callable[[], Awaitable[set[str] | None]] | None = None,
        alarms: Alarms | None = None,
        on_taken: Callable[[], Awaitable[None]] | None = None,
        free_space: Callable[[Path], int] = free_bytes,
    ) -> None:
        if interval <= 0:
            raise ValueError("snapshot_interval must be a positive number of seconds")
        self.node_id = node_id
        self.store = store
        self.appliers = appliers
        self.dir = snapshot_dir
        self.interval = interval
        self.retry = retry
        self._peers = peers
        self.alarms = alarms or Alarms()
        self.on_taken = on_taken
        self.free_space = free_space
        self.skip_reason = ""
        self._manifest = load_manifest(snapshot_dir)
        self._warned = ""
        self._sole_logged = False
        self._stopping = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    # -- state ------------------------------------------------------------------------------------

    def latest(self) -> dict[str, Any] | None:
        """The manifest of the artefact on disk (see the module docstring), or None."""
        return self._manifest

    def path(self) -> Path | None:
        """The artefact's file, or None."""
        return self.dir / str(self._manifest["file"]) if self._manifest else None

    def fields(self, domain: str) -> dict[str, Any]:
        """The positions row's ``snapshot`` and ``snapshot_skip`` for ``domain`` (ES-54)."""
        m = self._manifest
        snap = None
        if m is not None:
            pos = (m.get("positions") or {}).get(domain) or {}
            snap = {
                "seq": int(pos.get("seq", 0)),
                "taken_at": int(m["taken_at"]),
                "sha256": str(m["sha256"]),
                "bytes": int(m["bytes"]),
            }
        return {"snapshot": snap, "snapshot_skip": self.skip_reason}

    def recent(self) -> bool:
        """True when the artefact is younger than the interval (the healthy case, not published)."""
        m = self._manifest
        return m is not None and time.time() * 1_000_000 - int(m["taken_at"]) < self.interval * 1_000_000

    def invalidate(self) -> None:
        """Forget ``recent`` and wake the loop (after an adoption, ES-54)."""
        self._manifest = load_manifest(self.dir)
        self._wake.set()

    # -- deciding ---------------------------------------------------------------------------------

    async def reason(self) -> str:
        """Why a snapshot should not be taken now (``""``: take it). Raises ``volume_low`` as measured."""
        if self._peers is not None:
            nodes = await self._peers()
            if nodes is not None and not (nodes - {self.node_id}):
                return "sole_node"
        for a in self.appliers.values():
            if a.copy_state() == "out_of_service":
                return "failed"
        if not all(a.drained for a in self.appliers.values()):
            return "unhydrated"
        if any(a.lag > LAGGING_RECORDS for a in self.appliers.values()):
            return "lagging"
        sizes = self.store.sizes()
        need = int(SPACE_FACTOR * (sizes["store_bytes"] + sizes["wal_bytes"]))
        try:
            free = self.free_space(self.dir)
        except OSError:
            free = -1
        low = free < need
        self.alarms.set("volume_low", low, volume=str(self.dir), free_bytes=free, needed_bytes=need)
        return "insufficient_space" if low else ""

    async def take(self) -> dict[str, Any]:
        """Take a snapshot now, whatever the reasons (tests, the benchmark, ``attempt``).

        Raises:
            SnapshotFailed: see :func:`take_snapshot`.
        """
        async with self._lock:
            manifest = await asyncio.to_thread(take_snapshot, self.store.path, self.dir, node_id=self.node_id)
        self._manifest = manifest
        return manifest

    async def attempt(self) -> str:
        """One turn of the loop: decide, take or decline, log and publish.

        Returns:
            ``""`` after a snapshot, else the skip reason.
        """
        reason = await self.reason()
        if not reason:
            t0 = time.monotonic()
            try:
                m = await self.take()
            except SnapshotFailed as e:
                reason = "failed"
                _log.warning("statelog_snapshot_failed", error=str(e), dir=str(self.dir))
            else:
                _log.info(
                    "statelog_snapshot_taken",
                    sha256=m["sha256"],
                    bytes=m["bytes"],
                    positions={d: p["seq"] for d, p in m["positions"].items()},
                    elapsed_ms=int((time.monotonic() - t0) * 1000),
                )
        self._note(reason)
        changed = reason != self.skip_reason
        self.skip_reason = reason
        if self.on_taken is not None and (not reason or changed):
            with contextlib.suppress(Exception):
                await self.on_taken()
        return reason

    def _note(self, reason: str) -> None:
        if not reason:
            self._warned = ""
            self._sole_logged = False
            return
        if reason == "sole_node":
            if not self._sole_logged:
                self._sole_logged = True
                _log.info("statelog_snapshot_sole_node", node=self.node_id, recovery="crewlet backup")
            return
        self._sole_logged = False
        if load_manifest(self.dir) is None and reason != self._warned:
            self._warned = reason
            _log.warning("statelog_no_snapshot_yet", node=self.node_id, reason=reason)

    # -- the loop ---------------------------------------------------------------------------------

    def _first_delay(self) -> float:
        m = self._manifest
        if m is None:
            return 0.0
        age = time.time() - int(m["taken_at"]) / 1_000_000
        return max(0.0, self.interval - age)

    async def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stopping and not self._wake.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(left, 1.0))
        self._wake.clear()

    async def _loop(self) -> None:
        await self._sleep(self._first_delay())
        deadline = time.monotonic() + self.retry  # a booting copy is not "failing": let it hydrate first
        while not self._stopping and time.monotonic() < deadline:
            if all(a.drained for a in self.appliers.values()):
                break
            await asyncio.sleep(0.1)
        while not self._stopping:
            try:
                reason = await self.attempt()
            except Exception as e:  # noqa: BLE001 - the loop outlives any one attempt
                _log.warning("statelog_snapshot_failed", error=f"{type(e).__name__}: {e}")
                reason = "failed"
            await self._sleep(self.interval if not reason else self.retry)

    def start(self) -> None:
        """Start the loop: the first attempt comes when the artefact on disk (if any) is one interval old."""
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._loop(), name="estate-snapshots")

    async def stop(self, grace: float = 30.0) -> None:
        """Stop the loop: an attempt in hand gets ``grace`` seconds to finish (a snapshot is never
        left half-written: the artefact is switched by one rename), then the loop is cancelled —
        an attempt stuck on a store or a broker that does not answer must not hold a node's stop
        forever; what it leaves is a ``.tmp`` file the next start removes."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            await stop_task(self._task, name="estate-snapshots", grace=grace)
            self._task = None
