"""The objects collector: a singleton duty over the company's object store (ES-75, ES-74, FL-5).

Runs on the node holding the ``worker:objects`` lease (:mod:`services.workers.app`). The duty loop
ticks every :func:`objects_heartbeat` seconds (at most 15 s, renewing the lease, whose TTL is the
seat lease TTL); a tick runs a pass when the last pass recorded in the slot (by whichever node) is
at least :data:`COLLECT_INTERVAL` seconds old (hourly; ``CREWLET_OBJECTS_COLLECT_SECONDS``
overrides it, e.g. in tests), so the cadence survives a hand-over; with no pass recorded yet, the
first runs one interval after the duty started here (a booting fleet appends no barrier for it). One pass
(:meth:`Collector.run_pass`):

1. **Lists the store** (every live object with its size and last-modified instant): nats through the
   bucket's meta messages (``$O.<bucket>.M.>``), s3 through ``ListObjectsV2``.
2. **Pins the estate** with a linearizable read of the tracker log (the domain file rows live in):
   a barrier record is appended and the pass waits until this node's copy has applied it, so the
   copy holds everything committed when the pass started (ES-26). A copy that cannot be pinned, or is
   out of service or lagging, deletes nothing (the audit still runs; the findings say why).
3. **Reads the named objects**: every distinct ``project_files.object_key`` with the first row naming
   it (``<project>/<path>@<version>``), its size and SHA-256 — one read transaction.
4. **Deletes orphans**: an object no row names is deleted only when it is older than
   :data:`GRACE` (24 h; ``CREWLET_OBJECTS_GRACE_SECONDS`` overrides it) **and** the pin held. Just
   before deleting, the object's age is read again: an upload that re-stored the same bytes
   (content-addressed keys) since the listing is younger and is kept.
5. **Audits every named object**: presence, size and digest from the store's own record (nats: the
   object info; s3: ``HeadObject`` and the digest metadata); the bytes are not read.
6. **Records the findings** in the ``objects`` coordination slot under :data:`FINDINGS_KEY` (beside
   the store's identity, ES-71) and raises the ``objects_missing`` alarm while any named file is
   missing or mismatching (cleared by a clean pass). ``GET /objects`` answers the findings and
   ``crewlet objects status`` names the files.

Findings (JSON): ``{"at": RFC 3339 UTC, "at_unix": unix seconds, "holder": node id, "store": identity, "duration_seconds",
"grace_seconds", "interval_seconds", "pinned": {"stream", "seq"} | null, "deletion": "done" | a
reason it was skipped, "named": count, "stored": count, "missing": [{"key", "file", "problem":
"absent"|"size"|"digest", "expected_size", "expected_sha256", "found_size", "found_sha256"}],
"deleted": [{"key", "age_seconds", "size"}], "kept": [{"key", "age_seconds", "reason": "young" |
"not_pinned"}] (unnamed objects left in place), "errors": [str], "remedy"}``. Lists are capped at
:data:`LIST_CAP` entries (the counts are whole: ``missing_count``, ``deleted_count``, ``kept_count``).

Not run in the maintenance or seal modes of ES-89 (``ctx.extras["mode"]``; this build starts no node
in them), while the node drains, or while it sheds (posture ``shed``/``stuck``).

Remedy for ``objects_missing``: check the store, restore the objects from a backup
(``crewlet backup restore-objects``) or upload the file again.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import nats.errors
import nats.js.errors

from shared import estate, logs, objects
from shared.coordination import Coordination
from shared.estate._alarms import Alarms

__all__ = [
    "ALARM",
    "COLLECT_INTERVAL",
    "FINDINGS_KEY",
    "GRACE",
    "LIST_CAP",
    "Collector",
    "StoredObject",
    "collect_interval",
    "objects_heartbeat",
    "grace_seconds",
    "list_objects",
    "read_findings",
]

COLLECT_INTERVAL = 3600.0
"""Seconds between passes (ES-75: hourly)."""
GRACE = 86400.0
"""Seconds an unnamed object is left alone (ES-75: 24 h), covering uploads whose row is on its way."""
FINDINGS_KEY = "findings"
"""Key in the ``objects`` coordination slot holding the last pass's findings (ES-71, ES-75)."""
ALARM = "objects_missing"
"""The alarm raised while any named object is absent or differs in size or digest (ES-92, FL-5)."""
LIST_CAP = 1000
"""Entries kept per findings list (the counts are whole)."""
REMEDY = "check the store, restore from a backup (crewlet backup restore-objects) or upload the file again"
"""What the alarm and ``crewlet objects status`` tell the operator to do."""
PIN_BUDGET = 30.0
"""Seconds the pass waits for its barrier to be applied here."""

_log = logs.get("workers.objects")


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        _log.warning("objects_env_invalid", variable=name, value=raw, used=default)
        return default
    return value if value >= 0 else default


def collect_interval() -> float:
    """Seconds between passes: ``CREWLET_OBJECTS_COLLECT_SECONDS`` when set (> 0), else 3600."""
    return max(0.1, _env_seconds("CREWLET_OBJECTS_COLLECT_SECONDS", COLLECT_INTERVAL))


def objects_heartbeat() -> float:
    """Seconds between the duty's ticks: the interval, at most 15 s (the lease is renewed on each)."""
    return min(collect_interval(), 15.0)


def grace_seconds() -> float:
    """Seconds an unnamed object is kept: ``CREWLET_OBJECTS_GRACE_SECONDS`` when set, else 86400."""
    return _env_seconds("CREWLET_OBJECTS_GRACE_SECONDS", GRACE)


@dataclass(frozen=True)
class StoredObject:
    """One live object as the store lists it.

    Attributes:
        key: The object key.
        size: Bytes.
        modified: Unix seconds it was last written (0.0 when the store does not say: never deleted).
    """

    key: str
    size: int
    modified: float


_NATS_ERRORS = (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError)


def _iso_seconds(value: Any) -> float:
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


async def _nats_meta(store: objects.NatsObjectStore, subject: str) -> dict[str, Any] | None:
    js = store._js  # the store's own connection (the seam has no listing call yet)
    try:
        msg = await js.get_last_msg(store.stream, subject)
    except nats.js.errors.NotFoundError:
        return None
    except _NATS_ERRORS as e:
        raise objects.ObjectStoreUnavailable(
            f"nats object store: reading {subject}: {type(e).__name__}: {e}"
        ) from None
    try:
        meta = json.loads(msg.data or b"{}")
    except ValueError:
        return None
    if not isinstance(meta, dict) or meta.get("deleted") or not meta.get("nuid"):
        return None
    if not _iso_seconds(meta.get("mtime")) and msg.time is not None:
        meta["mtime"] = msg.time.isoformat() if hasattr(msg.time, "isoformat") else ""
    return meta


async def _nats_list(store: objects.NatsObjectStore) -> list[StoredObject]:
    try:
        info = await store._js.stream_info(store.stream, subjects_filter=f"$O.{store.bucket}.M.>")
    except _NATS_ERRORS as e:
        raise objects.ObjectStoreUnavailable(
            f"nats object store: listing {store.bucket}: {type(e).__name__}: {e}"
        ) from None
    out: list[StoredObject] = []
    for subject in sorted((info.state.subjects or {}) if info.state else {}):
        meta = await _nats_meta(store, subject)
        if meta is None:
            continue
        out.append(
            StoredObject(
                str(meta.get("name", "")), int(meta.get("size") or 0), _iso_seconds(meta.get("mtime"))
            )
        )
    return out


async def _s3_list(store: objects.S3ObjectStore) -> list[StoredObject]:
    def run() -> list[StoredObject]:
        got: list[StoredObject] = []
        pages = store._client.get_paginator("list_objects_v2").paginate(Bucket=store.bucket)
        for page in pages:
            for o in page.get("Contents") or []:
                modified = o.get("LastModified")
                got.append(
                    StoredObject(
                        str(o["Key"]), int(o.get("Size") or 0), modified.timestamp() if modified else 0.0
                    )
                )
        return got

    try:
        return await store._run(run)
    except Exception as e:  # noqa: BLE001 - boto3/botocore raise many kinds; each is "unavailable" here
        raise objects.ObjectStoreUnavailable(
            f"s3 bucket {store.bucket}: listing: {type(e).__name__}: {e}"
        ) from None


async def list_objects(store: objects.ObjectStore) -> list[StoredObject]:
    """Every live object of ``store`` with its size and last-modified instant (ES-75).

    Raises:
        ObjectStoreUnavailable: the store could not be listed.
        TypeError: a backend this collector does not know.
    """
    if isinstance(store, objects.NatsObjectStore):
        return await _nats_list(store)
    if isinstance(store, objects.S3ObjectStore):
        return await _s3_list(store)
    raise TypeError(f"the collector cannot list a {type(store).__name__}")


async def modified_at(store: objects.ObjectStore, key: str) -> float | None:
    """Unix seconds ``key`` was last written, or None when no live object is there (re-read before a delete).

    Raises:
        ObjectStoreUnavailable: the store could not be asked.
    """
    if isinstance(store, objects.NatsObjectStore):
        meta = await _nats_meta(
            store, f"$O.{store.bucket}.M.{base64.urlsafe_b64encode(key.encode()).decode()}"
        )
        return None if meta is None else _iso_seconds(meta.get("mtime"))
    if isinstance(store, objects.S3ObjectStore):
        if await store.head(key) is None:
            return None
        try:
            resp = await store._run(store._client.head_object, Bucket=store.bucket, Key=key)
        except Exception as e:  # noqa: BLE001 - see _s3_list
            raise objects.ObjectStoreUnavailable(f"s3 bucket {store.bucket}: head {key!r}: {e}") from None
        modified = resp.get("LastModified")
        return modified.timestamp() if modified else 0.0
    raise TypeError(f"the collector cannot ask a {type(store).__name__}")


_NAMED_SQL = (
    "SELECT f.object_key, f.sha256, f.size, f.path, f.version, coalesce(p.key, f.project_id) "
    "FROM project_files f LEFT JOIN projects p ON p.id = f.project_id "
    "WHERE f.object_key != '' ORDER BY f.object_key, f.project_id, f.path, f.version"
)


def _named(conn: Any) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, sha, size, path, version, project in conn.exec_driver_sql(_NAMED_SQL):
        out.setdefault(
            str(key),
            {"key": str(key), "sha256": str(sha), "size": int(size), "file": f"{project}/{path}@{version}"},
        )
    return out


def _capped(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return items[:LIST_CAP]


async def read_findings(coord: Coordination) -> dict[str, Any] | None:
    """The last pass's findings from the ``objects`` slot, or None before the first pass.

    Raises:
        CoordinationUnavailable: the slot could not be read.
    """
    entry = await coord.get("objects", FINDINGS_KEY)
    if entry is None:
        return None
    try:
        data = json.loads(entry.value)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


class Collector:
    """One node's collector (ES-75): :meth:`run_pass` is the duty's tick.

    Args:
        store: The company's object store (``ctx.objects``).
        est: This node's open estate (:class:`shared.estate.Estate`; the workers role sits on a data
            node, FL-17).
        coord: The coordination store (the ``objects`` slot).
        node_id: This node's id (the barrier's writer, the findings' holder).
        alarms: Where ``objects_missing`` is raised and cleared.
        grace: Seconds an unnamed object is kept (default :func:`grace_seconds`).
        clock: Unix seconds now (tests may shift it).
    """

    def __init__(
        self,
        store: objects.ObjectStore,
        est: Any,
        coord: Coordination,
        *,
        node_id: str,
        alarms: Alarms,
        grace: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.est = est
        self.coord = coord
        self.node_id = node_id
        self.alarms = alarms
        self.grace = grace_seconds() if grace is None else grace
        self.clock = clock
        self.last: dict[str, Any] | None = None
        self.created = clock()

    async def _pin(self) -> tuple[dict[str, Any] | None, str]:
        """Barrier on the tracker log and wait for it here; return (pin, why deletion is off or "")."""
        domain = "tracker"
        try:
            seq = await self.est.log.barrier(
                domain, op_id=estate.mint_op_id("barrier-objects"), writer=self.node_id
            )
        except estate.EstateError as e:
            return None, f"the estate could not be pinned: {e}"
        applier = self.est.appliers[domain]
        if not await applier.wait_applied(seq, PIN_BUDGET):
            return None, f"the pin at {applier.stream}:{seq} was not applied here within {PIN_BUDGET:g} s"
        state = self.est.service.copy_state(domain)
        pin = {"stream": applier.stream, "seq": seq}
        if state != "serving":
            return pin, f"this node's {domain} copy is {state}"
        return pin, ""

    async def tick(self) -> dict[str, Any] | None:
        """Run a pass when the slot's last one is :func:`collect_interval` seconds old; with no pass
        recorded yet, one interval after this collector was built (a fresh fleet's first pass waits
        an interval: nothing to collect at boot, and no barrier record is appended while it boots).

        Returns:
            The new findings, or None when no pass was due.
        """
        last = await read_findings(self.coord)
        at = float((last or {}).get("at_unix") or self.created)
        if self.clock() - at < collect_interval():
            if self.last is None and last is not None:  # picked up after a hand-over: hold the slot's alarm
                self.alarms.set(
                    ALARM,
                    bool(last.get("missing")),
                    files=[m.get("file") for m in last.get("missing") or []][:20],
                    remedy=REMEDY,
                )
                self.last = last
            return None
        return await self.run_pass()

    async def run_pass(self) -> dict[str, Any]:
        """List, pin, read, delete orphans past the grace, audit, record; return the findings.

        Raises:
            ObjectStoreUnavailable: the store could not be listed (nothing is recorded).
            CoordinationUnavailable: the findings could not be written.
        """
        started = time.monotonic()
        now = self.clock()  # the pass's instant: before the listing, so ages are never overstated
        listed = await list_objects(self.store)  # before the pin: a row landing later is seen by the read
        pin, why = await self._pin()
        named = await self.est.store.read(_named)
        errors: list[str] = []
        deleted, kept = await self._delete_orphans(listed, named, now, pin, why, errors)
        missing = await self._audit(named, errors)
        findings: dict[str, Any] = {
            "at": datetime.fromtimestamp(now, UTC).isoformat().replace("+00:00", "Z"),
            "at_unix": now,
            "holder": self.node_id,
            "store": self.store.identity(),
            "duration_seconds": round(time.monotonic() - started, 3),
            "grace_seconds": self.grace,
            "interval_seconds": collect_interval(),
            "pinned": pin,
            "deletion": why or ("done" if pin is not None else "skipped: not pinned"),
            "named": len(named),
            "stored": len(listed),
            "missing": _capped(missing),
            "missing_count": len(missing),
            "deleted": _capped(deleted),
            "deleted_count": len(deleted),
            "kept": _capped(kept),
            "kept_count": len(kept),
            "errors": errors[:50],
            "remedy": REMEDY if missing else "",
        }
        await self.coord.put("objects", FINDINGS_KEY, json.dumps(findings).encode())
        self.alarms.set(ALARM, bool(missing), files=[m["file"] for m in missing[:20]], remedy=REMEDY)
        if missing:
            _log.error(
                "objects_missing", count=len(missing), files=[m["file"] for m in missing[:20]], remedy=REMEDY
            )
        _log.info(
            "objects_pass_done",
            named=len(named),
            stored=len(listed),
            deleted=len(deleted),
            kept=len(kept),
            missing=len(missing),
            deletion=findings["deletion"],
        )
        self.last = findings
        return findings

    async def _delete_orphans(
        self,
        listed: list[StoredObject],
        named: dict[str, Any],
        now: float,
        pin: dict[str, Any] | None,
        why: str,
        errors: list[str],
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Delete each unnamed object older than the grace, when the estate is pinned (ES-75).

        Returns ``(deleted, kept)`` rows; a failed delete is appended to ``errors``.
        """
        deleted: list[dict[str, Any]] = []
        kept: list[dict[str, Any]] = []
        for obj in listed:
            if obj.key in named:
                continue
            age = now - obj.modified if obj.modified else 0.0
            if age < self.grace or why or pin is None:
                reason = "young" if age < self.grace else "not_pinned"
                kept.append({"key": obj.key, "age_seconds": round(age, 1), "reason": reason})
                continue
            try:
                again = await modified_at(self.store, obj.key)
                if again is None:
                    continue
                if again and now - again < self.grace:  # re-stored since the listing: an upload on its way
                    kept.append({"key": obj.key, "age_seconds": round(now - again, 1), "reason": "young"})
                    continue
                if await self.store.delete(obj.key):
                    deleted.append({"key": obj.key, "age_seconds": round(age, 1), "size": obj.size})
                    _log.info("objects_orphan_deleted", key=obj.key, age_seconds=round(age, 1), size=obj.size)
            except objects.ObjectsError as e:
                errors.append(f"deleting {obj.key}: {e}")
        return deleted, kept

    async def _audit(self, named: dict[str, Any], errors: list[str]) -> list[dict[str, Any]]:
        """Head every named object: the absent ones and those whose size or digest differ (ES-75).

        A failed head is appended to ``errors``.
        """
        missing: list[dict[str, Any]] = []
        for key, row in sorted(named.items()):
            try:
                info = await self.store.head(key)
            except objects.ObjectsError as e:
                errors.append(f"auditing {key}: {e}")
                continue
            problem = ""
            if info is None:
                problem = "absent"
            elif info.size != row["size"]:
                problem = "size"
            elif info.sha256 and row["sha256"] and info.sha256.lower() != row["sha256"].lower():
                problem = "digest"
            if problem:
                missing.append(
                    {
                        "key": key,
                        "file": row["file"],
                        "problem": problem,
                        "expected_size": row["size"],
                        "expected_sha256": row["sha256"],
                        "found_size": None if info is None else info.size,
                        "found_sha256": None if info is None else info.sha256,
                    }
                )
        return missing
