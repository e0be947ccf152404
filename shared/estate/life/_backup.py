"""Backups of one data node (ES-81, ES-82, ES-92 ``backup_age``).

:func:`take_backup` writes, into an empty directory on the data node's own host::

    <dir>/store.db               the node-local file (``<store.dir>/node.db``: events, turns), copied first
    <dir>/store-replicated.db    the estate copy (``<store.dir>/estate.db``)
    <dir>/objects/<key>          every object the estate copy names (project file rows), verified
    <dir>/manifest.json          written last: an artefact without it is debris

The order (ES-81):

1. Refuse a relative or non-empty destination (naming it), one the host cannot name (a path
   component too long, an embedded NUL byte) or write into (read-only, not permitted: a probe
   file is written and removed before the first copy) as ``backup_destination_invalid`` (422), a
   full disk as ``backup_no_space`` (507), a copy out of service (``estate_partition_not_served``)
   and a second backup already running on this node. The destination is resolved
   (``Path.resolve()``): the announcement and ``backups.json`` carry the absolute path.
2. Before the first byte, take one heartbeated trim hold per domain in the ``trim_holds`` slot
   (key ``<domain>.backup-<node>``, value ``{"domain","kind":"backup","node","seq","at"}``) at the
   applier's position, re-put every 30 s while the backup runs (the bucket forgets a hold after
   3 minutes), deleted at the end whatever happened.
3. Each file: ``VACUUM INTO`` (a consistent snapshot; the running node keeps writing), reopen the
   copy, switch it out of WAL mode (``journal_mode=DELETE``: no ``-wal``/``-shm`` beside it),
   ``PRAGMA integrity_check``, compare its schema (``sqlite_master``) with the source's, then its
   SHA-256 and size go into the manifest with its table count.
4. ``objects/``: for every distinct object key the estate *copy* names (``project_files``), the object
   is fetched from the store and checked against the row's size and SHA-256; an absent or
   mismatching object fails the backup, naming the object and the file row.
5. Per domain, the log's first surviving sequence must be ≤ the copy's position + 1 (otherwise a
   node restored from it could never catch up): else no manifest (``backup_below_log``).
6. ``manifest.json`` (see :func:`take_backup`), then the announcement to the ``backups`` slot keyed
   by the node id; a failed announcement is logged (``backup_announce_failed``), not fatal.

A backup that fails once it has begun writing (disk full midway — SQLite's "database or disk is
full", ``ENOSPC`` — a failed check, an absent object) removes everything it wrote into the
destination (which was empty, or absent and created by it, when it began) and raises
:class:`BackupFailed`; no half-written directory is left behind.

Reading an artefact back (ES-83, ES-84): :func:`load_manifest` returns None only when
``manifest.json`` is absent and raises :class:`ManifestInvalid` naming the file and the field when it
is there but corrupt (empty, not JSON, not an object, a field of the wrong type, an object ``file``
that is not where :func:`object_file` puts its key). :func:`named_objects` lists the objects an
estate copy names, for the backup and for ``verify --restore`` alike.

The broker half: with ``stream.type: nats`` the logs, the coordination buckets and the object
bucket's stream live on the cluster and are backed up there (``nats account backup``); the manifest
says so. With an embedded broker the same holds — this build writes no stream snapshot (JetStream's
snapshot API is not offered by the client library we use): back up ``<store.dir>/jetstream`` with the
node stopped, or rely on the objects and rows in the artefact (the runbook in README.md).

``backup_age`` (ES-82, ES-92): each backup directory this node wrote is recorded in
``<store.dir>/backups.json``; :class:`BackupAgeWatch` reads the newest complete ``manifest.json``
among them on its tick and raises the alarm when there is none or it is older than
``retention.backup_max_age``. A deleted manifest counts as none, whatever a counter said.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY, Gauge

from shared import logs

from .._errors import Refused
from ..domains import LOGS
from ..log._ids import GENERATION, STREAMS, is_compacted
from ._artefact import (
    FORMAT,
    MANIFEST,
    NODE_FILE,
    RECORD_FILE,
    REPLICATED_FILE,
    BackupFailed,
    ManifestInvalid,
    _check_destination,
    _io_failure,
    _make_destination,
    _remove_written,
    _vacuum_copy,
    copy_summary,
    load_manifest,
    named_objects,
    newest_manifest,
    object_file,
    read_manifest,
    record_backup_dir,
    sha256_file,
)

__all__ = [
    "FORMAT",
    "HOLD_INTERVAL",
    "MANIFEST",
    "NODE_FILE",
    "RECORD_FILE",
    "REPLICATED_FILE",
    "BackupFailed",
    "ManifestInvalid",
    "copy_summary",
    "load_manifest",
    "named_objects",
    "newest_manifest",
    "object_file",
    "read_manifest",
    "sha256_file",
    "take_backup",
]

_log = logs.get("backup")

HOLD_INTERVAL = 30.0
"""Seconds between re-puts of a backup's trim holds (the ``trim_holds`` bucket forgets after 3 min)."""


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
    existing = getattr(REGISTRY, "_names_to_collectors", {}).get(name)
    if isinstance(existing, Gauge):
        return existing
    return Gauge(name, doc, list(labels))


_HOLDS = _gauge("crewlet_backup_holds", "Live trim holds this node's running backup keeps (ES-82)")
_DURATION = _gauge("crewlet_backup_duration_seconds", "How long the last backup's copy took (ES-82)")
_busy: set[str] = set()


class _Holds:
    """The backup's heartbeated trim holds (one per domain), re-put every ``interval`` seconds."""

    def __init__(self, coord: Any, node_id: str, seqs: dict[str, int], interval: float) -> None:
        self._coord = coord
        self._node = node_id
        self._seqs = seqs
        self._interval = interval
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def _key(self, domain: str) -> str:
        return f"{domain}.backup-{self._node}"

    async def _put_all(self) -> None:
        now = int(time.time() * 1_000_000)
        for domain, seq in self._seqs.items():
            value = {"domain": domain, "kind": "backup", "node": self._node, "seq": seq, "at": now}
            await self._coord.put("trim_holds", self._key(domain), json.dumps(value).encode())

    async def take(self) -> None:
        if self._coord is None:
            return
        try:
            await self._put_all()
        except Exception as e:  # noqa: BLE001 - any coordination failure refuses the backup, named
            raise BackupFailed(
                "backup_hold_unavailable",
                503,
                f"the trim holds could not be written: {type(e).__name__}: {e}",
            ) from None
        _HOLDS.set(len(self._seqs))
        self._task = asyncio.create_task(self._loop(), name="backup-holds")

    async def _loop(self) -> None:
        while not self._stopping:
            waited = 0.0
            while not self._stopping and waited < self._interval:
                await asyncio.sleep(0.25)
                waited += 0.25
            if self._stopping:
                break
            try:
                await self._put_all()
            except Exception as e:  # noqa: BLE001 - logged; the next beat tries again
                _log.warning("backup_hold_unrenewed", error=f"{type(e).__name__}: {e}")

    async def release(self) -> None:
        self._stopping = True
        if self._task is not None:
            await self._task
            self._task = None
        if self._coord is None:
            return
        for domain in self._seqs:
            try:
                await self._coord.delete("trim_holds", self._key(domain))
            except Exception as e:  # noqa: BLE001 - the bucket's age lapses it within 3 minutes
                _log.warning("backup_hold_unreleased", domain=domain, error=f"{type(e).__name__}: {e}")
        _HOLDS.set(0)


async def _fetch_objects(store: Any, named: list[dict[str, Any]], dest: Path) -> None:
    from shared import objects as objs

    for o in named:
        target = dest / o["file"]
        target.parent.mkdir(parents=True, exist_ok=True)
        h = hashlib.sha256()
        size = 0
        try:
            chunks = await store.get(o["key"])
            with target.open("wb") as f:
                async for chunk in chunks:
                    h.update(chunk)
                    size += len(chunk)
                    f.write(chunk)
        except objs.ObjectNotFound:
            raise BackupFailed(
                "backup_object_missing",
                502,
                f"object {o['key']} (named by file {o['named_by']}) is absent from the object store",
            ) from None
        except objs.ObjectCorrupt as e:
            raise BackupFailed(
                "backup_object_corrupt",
                502,
                f"object {o['key']} (file {o['named_by']}) failed verification: {e}",
            ) from None
        except objs.ObjectsError as e:
            raise BackupFailed("objects_unavailable", 503, f"reading object {o['key']}: {e}") from None
        except OSError as e:
            raise _io_failure(f"writing object {o['key']} to {target}", e) from None
        if h.hexdigest() != o["sha256"] or size != o["size"]:
            raise BackupFailed(
                "backup_object_corrupt",
                502,
                f"object {o['key']} (file {o['named_by']}) is {size} bytes with sha256 {h.hexdigest()}; "
                f"the row says {o['size']} bytes, sha256 {o['sha256']}",
            )


def _stream_note(stream_type: str) -> dict[str, Any]:
    if stream_type == "nats":
        note = (
            "stream.type: nats: the stream half (the logs CREWLET_TRACKER_LOG and CREWLET_PAGES_LOG, the "
            "coordination buckets, the object bucket) is backed up at the cluster, e.g. `nats account backup`; "
            "this artefact holds the rows and the objects"
        )
    else:
        note = (
            "stream.type: embedded: this build writes no stream snapshot; back up <store.dir>/jetstream with the "
            "node stopped if the logs must be restored too; this artefact holds the rows and the objects"
        )
    return {"type": stream_type, "included": False, "note": note}


async def take_backup(
    est: Any,
    *,
    node_id: str,
    dest: Path,
    store_dir: Path,
    objects: Any,
    coord: Any,
    owner: str = "",
    stream_type: str = "nats",
    hold_interval: float = HOLD_INTERVAL,
) -> dict[str, Any]:
    """Write a backup of this data node into ``dest`` on its own host (ES-81, ES-82).

    Args:
        est: The open :class:`~shared.estate.Estate` (its appliers, store and logs).
        node_id: This node's id (hold keys, the announcement key, the manifest's ``node``).
        dest: An absolute directory, absent or empty; created when absent.
        store_dir: ``store.dir`` (``node.db`` and ``estate.db`` are read from it; ``backups.json``
            is written there).
        objects: The company's :class:`~shared.objects.ObjectStore`.
        coord: The coordination store (``trim_holds``, ``backups``); None skips both.
        owner: ``retention.backup_owner`` (free text, into the manifest).
        stream_type: ``stream.type`` (``nats`` or ``embedded``), for the manifest's stream note.
        hold_interval: Seconds between re-puts of the trim holds.

    Returns:
        The manifest written to ``<dest>/manifest.json``::

            {"format": 1, "node", "taken_at": unix µs, "owner", "duration_seconds",
             "positions": {domain: {"stream", "generation", "seq"}},   # read out of the estate copy
             "files": {"store.db": {"sha256", "size", "tables"}, "store-replicated.db": {...}},
             "objects": {"count", "bytes", "items": [{"key", "sha256", "size", "file", "named_by"}]},
             "streams": {"type", "included": false, "note"}}

    Raises:
        BackupFailed: refused or failed (see :class:`BackupFailed` for the codes); no manifest is
            written, and whatever this backup had written into ``dest`` is removed (``dest`` too
            when the backup created it). Any other failure while copying is raised as
            ``backup_copy_failed`` naming it.
    """
    dest = _check_destination(dest)
    _check_served(est, node_id)
    key = str(store_dir.resolve())
    if key in _busy:
        raise BackupFailed("backup_in_progress", 409, f"a backup of {node_id} is already running")
    _busy.add(key)
    started = time.monotonic()
    holds = _Holds(coord, node_id, {d: a.applied for d, a in est.appliers.items()}, hold_interval)
    writing = False
    top: Path | None = None
    try:
        await holds.take()
        _log.info("backup_started", dir=str(dest), holds={d: a.applied for d, a in est.appliers.items()})
        top = _make_destination(dest)
        writing = True
        manifest = await _write_artefact(est, dest, store_dir, objects, node_id, owner, stream_type, started)
    except BaseException as e:
        if writing:
            await asyncio.to_thread(_remove_written, dest, top)
        if isinstance(e, BackupFailed):
            if writing:
                e.message += f" (what the backup wrote into {dest} was removed)"
            _log.error("backup_failed", dir=str(dest), code=e.code, error=e.message)
        raise
    finally:
        await holds.release()
        _busy.discard(key)
    await _conclude(coord, node_id, manifest, dest, store_dir)
    return manifest


def _check_served(est: Any, node_id: str) -> None:
    """Refuse a backup while any copy is out of service (``estate_partition_not_served``, 503)."""
    for domain in est.appliers:
        if est.service.copy_state(domain) == "out_of_service":
            raise BackupFailed(
                "estate_partition_not_served",
                503,
                f"the {domain} copy on {node_id} is out of service; a backup needs every copy in service",
            )


async def _write_artefact(
    est: Any,
    dest: Path,
    store_dir: Path,
    objects: Any,
    node_id: str,
    owner: str,
    stream_type: str,
    started: float,
) -> dict[str, Any]:
    """Copy the files and objects into ``dest``, then write ``manifest.json`` last and fsync ``dest``;
    return the manifest. Every failure is a :class:`BackupFailed` naming it."""
    try:
        manifest = await _copy(est, dest, store_dir, objects, node_id, owner, stream_type)
        manifest["duration_seconds"] = round(time.monotonic() - started, 3)
        _DURATION.set(manifest["duration_seconds"])
        tmp = dest / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
        os.replace(tmp, dest / MANIFEST)
    except (OSError, sqlite3.Error) as e:
        raise _io_failure(f"writing the backup into {dest}", e) from None
    except BackupFailed:
        raise
    except Exception as e:  # noqa: BLE001 - named, never an unnamed 500
        raise BackupFailed("backup_copy_failed", 500, f"{dest}: {type(e).__name__}: {e}") from None
    with contextlib.suppress(OSError):
        fd = os.open(str(dest), os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return manifest


async def _copy(
    est: Any, dest: Path, store_dir: Path, objects: Any, node_id: str, owner: str, stream_type: str
) -> dict[str, Any]:
    taken_at = int(time.time() * 1_000_000)
    node_copy = await asyncio.to_thread(_vacuum_copy, store_dir / "node.db", dest / NODE_FILE)  # store first
    estate_copy = await asyncio.to_thread(_vacuum_copy, store_dir / "estate.db", dest / REPLICATED_FILE)
    positions: dict[str, Any] = {}
    for domain in LOGS:
        positions[domain] = estate_copy["positions"].get(
            domain, {"stream": STREAMS[domain], "generation": GENERATION, "seq": 0}
        )
    named = await asyncio.to_thread(named_objects, dest / REPLICATED_FILE)
    await _fetch_objects(objects, named, dest)
    for name, pos in positions.items():
        if is_compacted(name):  # its vanished sequences were superseded, never trimmed (ES-69, AG-1)
            continue
        try:
            first, _last = await est.log.head(name)
        except Refused as e:
            raise BackupFailed(
                "backup_below_log", 503, f"cannot read the {name} log to check the copy against it: {e}"
            ) from None
        if first > pos["seq"] + 1:
            raise BackupFailed(
                "backup_below_log",
                409,
                f"{name}: the log's first surviving record is {first} but the copy reaches only {pos['seq']}; "
                "a node restored from it could not catch up (no manifest written)",
            )
    files = {
        NODE_FILE: {k: node_copy[k] for k in ("sha256", "size", "tables")},
        REPLICATED_FILE: {k: estate_copy[k] for k in ("sha256", "size", "tables")},
    }
    return {
        "format": FORMAT,
        "node": node_id,
        "taken_at": taken_at,
        "owner": owner,
        "positions": positions,
        "files": files,
        "objects": {"count": len(named), "bytes": sum(o["size"] for o in named), "items": named},
        "streams": _stream_note(stream_type),
    }


async def _conclude(coord: Any, node_id: str, manifest: dict[str, Any], dest: Path, store_dir: Path) -> None:
    """Record the written backup in ``backups.json`` (a failure is logged: ``backup_unrecorded``), log
    ``backup_written`` and announce it."""
    try:
        record_backup_dir(store_dir, dest)
    except OSError as e:
        _log.warning("backup_unrecorded", dir=str(dest), error=str(e))
    _log.info(
        "backup_written",
        dir=str(dest),
        positions=manifest["positions"],
        objects=manifest["objects"]["count"],
        duration_seconds=manifest["duration_seconds"],
    )
    await _announce(coord, node_id, manifest, dest)


async def _announce(coord: Any, node_id: str, manifest: dict[str, Any], dest: Path) -> None:
    if coord is None:
        return
    value = {
        "node": node_id,
        "taken_at": manifest["taken_at"],
        "dir": str(dest),
        "owner": manifest["owner"],
        "verified": True,
        "positions": manifest["positions"],
    }
    try:
        await coord.put("backups", node_id, json.dumps(value).encode())
    except Exception as e:  # noqa: BLE001 - ES-82: a failed announcement is logged, not fatal
        _log.warning("backup_announce_failed", node=node_id, error=f"{type(e).__name__}: {e}")
