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
import errno
import hashlib
import json
import os
import re
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY, Gauge

from shared import logs

from .._alarms import Alarms
from .._errors import Refused
from ..domains import LOGS, REGISTERED
from ..log._ids import GENERATION, STREAMS
from ._snapshot import file_sha256

__all__ = [
    "FORMAT",
    "HOLD_INTERVAL",
    "MANIFEST",
    "NODE_FILE",
    "RECORD_FILE",
    "REPLICATED_FILE",
    "BackupAgeWatch",
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

MANIFEST = "manifest.json"
"""Name of the manifest, written last."""
FORMAT = 1
"""The manifest ``format`` this build writes (and the only one it reads back)."""
NODE_FILE = "store.db"
"""The artefact's copy of the node-local file (``<store.dir>/node.db``)."""
REPLICATED_FILE = "store-replicated.db"
"""The artefact's copy of the estate (``<store.dir>/estate.db``)."""
RECORD_FILE = "backups.json"
"""Under ``store.dir``: the backup directories this node wrote (``{"dirs": [...]}``, newest last)."""
HOLD_INTERVAL = 30.0
"""Seconds between re-puts of a backup's trim holds (the ``trim_holds`` bucket forgets after 3 min)."""
_RECORD_KEEP = 32
_SAFE_KEY = re.compile(r"^[A-Za-z0-9._=+-]+(/[A-Za-z0-9._=+-]+)*$")


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
    existing = getattr(REGISTRY, "_names_to_collectors", {}).get(name)
    if isinstance(existing, Gauge):
        return existing
    return Gauge(name, doc, list(labels))


_AGE = _gauge(
    "crewlet_backup_age_seconds", "Age of the newest complete backup manifest on disk (ES-82)", ("node",)
)
_HOLDS = _gauge("crewlet_backup_holds", "Live trim holds this node's running backup keeps (ES-82)")
_DURATION = _gauge("crewlet_backup_duration_seconds", "How long the last backup's copy took (ES-82)")
_busy: set[str] = set()


class BackupFailed(Exception):
    """A backup was refused or failed; nothing usable was left (no manifest).

    Attributes:
        code: ``backup_destination_invalid`` (422), ``backup_destination_not_empty`` (409),
            ``backup_in_progress`` (409), ``estate_partition_not_served`` (503),
            ``backup_hold_unavailable`` (503), ``backup_object_missing`` (502),
            ``backup_object_corrupt`` (502), ``objects_unavailable`` (503),
            ``backup_no_space`` (507: the destination's disk filled up, SQLite "database or disk is
            full" or ``ENOSPC``/``EDQUOT``), ``backup_copy_failed`` (500: an integrity or schema
            check, or another I/O failure, named), ``backup_below_log`` (409).
        status: The HTTP status ``POST /backup`` answers with.
        message: What happened, naming the directory, domain, object or file concerned.
    """

    def __init__(self, code: str, status: int, message: str) -> None:
        self.code = code
        self.status = status
        self.message = message
        super().__init__(f"{code}: {message}")


sha256_file = file_sha256
"""Return the SHA-256 (lowercase hex) of the file at ``path`` (the snapshot's reader, shared)."""


def object_file(key: str) -> str:
    """Return where object ``key`` lives inside an artefact, relative to it.

    ``objects/<key>`` when the key is a plain relative path (the content addresses
    ``sha256/<2 hex>/<hex>`` always are); otherwise ``objects/_/<sha256 of the key>``.
    """
    if _SAFE_KEY.match(key) and not any(seg in (".", "..") for seg in key.split("/")):
        return f"objects/{key}"
    return f"objects/_/{hashlib.sha256(key.encode()).hexdigest()}"


class ManifestInvalid(ValueError):
    """``manifest.json`` is there but corrupt (ES-83): the backup cannot be trusted or restored.

    Attributes:
        path: The manifest file.
        field: The field at fault (``objects.items[2].size``), or ``""`` for the file as a whole.
        problem: What is wrong with it.
    """

    def __init__(self, path: Path, field: str, problem: str) -> None:
        self.path = path
        self.field = field
        self.problem = problem
        where = f"field {field}: " if field else ""
        super().__init__(f"{path} is corrupt: {where}{problem}")


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        type(v), "a list" if isinstance(v, list) else "an object" if isinstance(v, dict) else type(v).__name__
    )


def _want(path: Path, field: str, v: Any, kind: type | tuple[type, ...], name: str) -> Any:
    ok = isinstance(v, kind) and not (isinstance(v, bool) and kind in (int, (int, float)))
    if not ok:
        raise ManifestInvalid(path, field, f"expected {name}, got {_kind(v)} ({json.dumps(v)[:60]})")
    return v


def _want_count(path: Path, field: str, v: Any) -> int:
    n = _want(path, field, v, int, "a non-negative integer")
    if n < 0:
        raise ManifestInvalid(path, field, f"expected a non-negative integer, got {n}")
    return int(n)


def load_manifest(directory: Path) -> dict[str, Any] | None:
    """Return ``<directory>/manifest.json`` parsed and type-checked, or None when it is absent.

    Checked: the top level is an object; ``taken_at`` a positive integer (µs); ``node``, ``owner``,
    ``format`` of their types when present; ``positions`` an object of
    ``{"stream": str, "generation": int, "seq": int}``; ``files`` an object of
    ``{"sha256": str, "size": int, "tables": int}``; ``objects`` an object with ``items`` a list of
    ``{"key", "sha256": str, "size": int, "file": str}`` whose ``file`` is :func:`object_file` of its
    key (a manifest never points outside ``objects/``). The values themselves (``format``, an empty
    ``node``, a ``taken_at`` in the future) are for the reader to judge.

    Raises:
        ManifestInvalid: the file is there but unreadable, empty, not JSON, not a JSON object or a
            field has the wrong type; the message names the file and the field.
    """
    path = directory / MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestInvalid(path, "", f"unreadable ({type(e).__name__}: {e})") from None
    if not text.strip():
        raise ManifestInvalid(path, "", "the file is empty")
    try:
        m = json.loads(text)
    except ValueError as e:
        raise ManifestInvalid(path, "", f"not valid JSON ({e})") from None
    if not isinstance(m, dict):
        raise ManifestInvalid(path, "", f"expected a JSON object, got {_kind(m)}")
    taken = _want(path, "taken_at", m.get("taken_at"), int, "an integer (unix µs)")
    if taken <= 0:
        raise ManifestInvalid(path, "taken_at", f"expected a positive integer (unix µs), got {taken}")
    for name, kind, what in (
        ("node", str, "a string"),
        ("owner", str, "a string"),
        ("format", int, "an integer"),
    ):
        if name in m:
            _want(path, name, m[name], kind, what)
    positions = _want(path, "positions", m.get("positions"), dict, "an object")
    for domain, p in positions.items():
        _want(path, f"positions.{domain}", p, dict, "an object")
        _want(path, f"positions.{domain}.stream", p.get("stream"), str, "a string")
        _want_count(path, f"positions.{domain}.generation", p.get("generation"))
        _want_count(path, f"positions.{domain}.seq", p.get("seq"))
    files = _want(path, "files", m.get("files"), dict, "an object")
    for name, f in files.items():
        _want(path, f"files.{name}", f, dict, "an object")
        _want(path, f"files.{name}.sha256", f.get("sha256"), str, "a string")
        _want_count(path, f"files.{name}.size", f.get("size"))
        _want_count(path, f"files.{name}.tables", f.get("tables"))
    objects = _want(path, "objects", m.get("objects"), dict, "an object")
    items = _want(path, "objects.items", objects.get("items"), list, "a list")
    for i, o in enumerate(items):
        at = f"objects.items[{i}]"
        _want(path, at, o, dict, "an object")
        key = _want(path, f"{at}.key", o.get("key"), str, "a string")
        _want(path, f"{at}.sha256", o.get("sha256"), str, "a string")
        _want_count(path, f"{at}.size", o.get("size"))
        if _want(path, f"{at}.file", o.get("file"), str, "a string") != object_file(key):
            raise ManifestInvalid(
                path, f"{at}.file", f"{o['file']!r} is not where key {key!r} lives ({object_file(key)!r})"
            )
        if "named_by" in o:
            _want(path, f"{at}.named_by", o["named_by"], str, "a string")
    return m


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """Return ``<directory>/manifest.json`` parsed and checked, or None when absent or corrupt (debris)."""
    try:
        return load_manifest(directory)
    except ManifestInvalid:
        return None


def _schema(con: sqlite3.Connection) -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in con.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
        )
    ]


def copy_summary(path: Path) -> dict[str, Any]:
    """Open a copied SQLite file and return what the manifest says of it.

    Returns:
        ``{"integrity": "ok"|problem, "tables": n, "positions": {domain: {"stream", "generation", "seq"}}}``;
        ``positions`` is empty for a file without ``statelog_checkpoint`` (the node-local file).

    Raises:
        sqlite3.Error: the file cannot be opened as SQLite.
    """
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        rows = [str(r[0]) for r in con.execute("PRAGMA integrity_check")]
        tables = int(con.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0])
        positions: dict[str, Any] = {}
        has_cp = con.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'statelog_checkpoint'"
        ).fetchone()
        if has_cp:
            for domain, stream, generation, seq in con.execute(
                "SELECT domain, stream, generation, seq FROM statelog_checkpoint ORDER BY domain"
            ):
                positions[str(domain)] = {
                    "stream": str(stream),
                    "generation": int(generation),
                    "seq": int(seq),
                }
        return {
            "integrity": "ok" if rows == ["ok"] else "; ".join(rows[:5]),
            "tables": tables,
            "positions": positions,
        }
    finally:
        con.close()


_NO_SPACE_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_UNWRITABLE_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG, errno.ENOTDIR}


def _io_failure(what: str, e: BaseException) -> BackupFailed:
    """Name an I/O failure while writing: no space → 507 ``backup_no_space``, else 500 ``backup_copy_failed``."""
    full = (isinstance(e, OSError) and e.errno in _NO_SPACE_ERRNOS) or (
        isinstance(e, sqlite3.Error)
        and (getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(e))
    )
    if full:
        return BackupFailed("backup_no_space", 507, f"{what}: no space left on the destination's disk ({e})")
    return BackupFailed("backup_copy_failed", 500, f"{what} failed: {type(e).__name__}: {e}")


def _vacuum_copy(src: Path, dst: Path) -> dict[str, Any]:
    """``VACUUM INTO`` ``src`` → ``dst``, reopen, integrity check, schema compare; no -wal left."""
    if not src.exists():
        raise BackupFailed("backup_copy_failed", 500, f"{src} does not exist; nothing to copy")
    con = sqlite3.connect(str(src), timeout=30.0, isolation_level=None)
    try:
        con.execute("PRAGMA busy_timeout=30000")
        con.execute("VACUUM INTO ?", (str(dst),))
        source_schema = _schema(con)
    except sqlite3.Error as e:
        raise _io_failure(f"VACUUM INTO {dst} from {src}", e) from None
    finally:
        con.close()
    try:
        return _check_copy(src, dst, source_schema)
    except (OSError, sqlite3.Error) as e:
        raise _io_failure(f"checking the copy {dst}", e) from None


def _check_copy(src: Path, dst: Path, source_schema: list[tuple[Any, ...]]) -> dict[str, Any]:
    copy = sqlite3.connect(str(dst), isolation_level=None)
    try:
        copy.execute("PRAGMA journal_mode=DELETE")  # a copy carries no WAL: it stands alone
        copy_schema = _schema(copy)
    finally:
        copy.close()
    if copy_schema != source_schema:
        raise BackupFailed(
            "backup_copy_failed", 500, f"{dst}: the copy's schema differs from {src}'s (sqlite_master)"
        )
    summary = copy_summary(dst)
    if summary["integrity"] != "ok":
        raise BackupFailed("backup_copy_failed", 500, f"{dst}: integrity_check says {summary['integrity']}")
    for side in ("-wal", "-shm", "-journal"):
        if Path(str(dst) + side).exists():
            raise BackupFailed("backup_copy_failed", 500, f"{dst}{side} was left beside the copy")
    return {
        "sha256": sha256_file(dst),
        "size": dst.stat().st_size,
        "tables": summary["tables"],
        "positions": summary["positions"],
    }


def named_objects(path: Path) -> list[dict[str, Any]]:
    """Every distinct object key the estate copy at ``path`` names, with the first row naming it
    (each registered domain's :attr:`~shared.estate.domains.EstateDomain.backup_objects` query).

    Returns:
        ``[{"key", "sha256", "size", "file", "named_by"}]`` by key (``file``: :func:`object_file`).

    Raises:
        sqlite3.Error: the file does not open as SQLite or has no ``project_files`` table.
    """
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        out: dict[str, dict[str, Any]] = {}
        rows = [row for d in REGISTERED if d.backup_objects for row in con.execute(d.backup_objects)]
        for key, sha, size, fpath, version, project in rows:
            if key not in out:
                out[str(key)] = {
                    "key": str(key),
                    "sha256": str(sha),
                    "size": int(size),
                    "file": object_file(str(key)),
                    "named_by": f"{project}/{fpath}@{version}",
                }
        return list(out.values())
    finally:
        con.close()


_named_objects = named_objects


def _check_destination(dest: Path) -> Path:
    """Refuse a destination that is relative, unnameable, a file or not empty; return it resolved."""
    if not dest.is_absolute():
        raise BackupFailed(
            "backup_destination_invalid",
            422,
            f"dir {str(dest)!r} is relative; give an absolute path on the node",
        )
    try:
        dest = dest.resolve()
        if dest.exists() and not dest.is_dir():
            raise BackupFailed("backup_destination_invalid", 422, f"dir {dest} exists and is not a directory")
        if dest.is_dir() and any(dest.iterdir()):
            raise BackupFailed(
                "backup_destination_not_empty",
                409,
                f"{dest} is not empty; a backup is written into an empty (or absent) directory",
            )
    except ValueError as e:  # an embedded NUL byte
        raise BackupFailed(
            "backup_destination_invalid", 422, f"dir {str(dest)!r} is not a valid path: {e}"
        ) from None
    except OSError as e:  # ENAMETOOLONG, ELOOP, EACCES on a parent, ...
        raise BackupFailed(
            "backup_destination_invalid", 422, f"dir {str(dest)!r} cannot be used: {e.strerror or e}"
        ) from None
    return dest


def _make_destination(dest: Path) -> Path | None:
    """Create ``dest`` (absent or empty) and prove it writable; return the topmost directory created.

    Raises:
        BackupFailed: ``backup_destination_invalid`` (422) when it cannot be created or written
            (read-only, not permitted, a bad name), ``backup_no_space`` (507) when its disk is full.
    """
    top: Path | None = None
    try:
        probe_dir = dest
        while not probe_dir.exists():
            top = probe_dir
            probe_dir = probe_dir.parent
        dest.mkdir(parents=True, exist_ok=True)
        probe = dest / ".crewlet-backup-probe"
        with probe.open("wb") as f:
            f.write(b"probe")
            f.flush()
            os.fsync(f.fileno())
        probe.unlink()
    except (OSError, ValueError) as e:
        _remove_written(dest, top)
        if isinstance(e, OSError) and e.errno in _NO_SPACE_ERRNOS:
            raise BackupFailed(
                "backup_no_space", 507, f"{dest}: no space left on its disk ({e.strerror})"
            ) from None
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise BackupFailed("backup_destination_invalid", 422, f"cannot write into {dest}: {why}") from None
    return top


def _remove_written(dest: Path, top: Path | None) -> None:
    """Remove what a backup writes into ``dest`` (and the directories it created, up to ``top``)."""
    for name in (NODE_FILE, REPLICATED_FILE):
        for side in ("", "-journal", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                Path(str(dest / name) + side).unlink()
    for name in (MANIFEST + ".tmp", MANIFEST, ".crewlet-backup-probe"):
        with contextlib.suppress(OSError):
            (dest / name).unlink()
    with contextlib.suppress(OSError):
        shutil.rmtree(dest / "objects")
    if top is None:
        return
    d = dest
    while True:
        try:
            d.rmdir()  # only an empty directory: never anything it did not write
        except OSError:
            return
        if d == top or d.parent == d:
            return
        d = d.parent


def record_backup_dir(store_dir: Path, dest: Path) -> None:
    """Add ``dest`` to ``<store_dir>/backups.json`` (newest last, the last 32 kept)."""
    path = store_dir / RECORD_FILE
    try:
        dirs = [str(d) for d in json.loads(path.read_text()).get("dirs", [])]
    except (OSError, ValueError, AttributeError):
        dirs = []
    dirs = [d for d in dirs if d != str(dest)] + [str(dest)]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"dirs": dirs[-_RECORD_KEEP:]}, indent=2))
    os.replace(tmp, path)


def newest_manifest(store_dir: Path) -> dict[str, Any] | None:
    """Return the newest complete manifest among the directories this node recorded, or None.

    Complete: ``manifest.json`` parses and names ``taken_at`` and ``positions``. Each returned
    manifest carries ``"dir"`` (where it was found).
    """
    try:
        dirs = [Path(d) for d in json.loads((store_dir / RECORD_FILE).read_text()).get("dirs", [])]
    except (OSError, ValueError, AttributeError):
        return None
    best: dict[str, Any] | None = None
    for d in dirs:
        m = read_manifest(d)  # a corrupt manifest counts as none
        if m is None or not m.get("positions"):
            continue
        if best is None or m["taken_at"] > best["taken_at"]:
            best = {**m, "dir": str(d)}
    return best


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
    for domain in est.appliers:
        if est.service.copy_state(domain) == "out_of_service":
            raise BackupFailed(
                "estate_partition_not_served",
                503,
                f"the {domain} copy on {node_id} is out of service; a backup needs every copy in service",
            )
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


class BackupAgeWatch:
    """The ``backup_age`` alarm and the ``crewlet_backup_age_seconds`` gauge of one data node (ES-82, ES-92).

    Args:
        node_id: This node's id (the gauge's label).
        store_dir: ``store.dir`` (where ``backups.json`` records this node's backup directories).
        max_age: ``retention.backup_max_age`` in seconds.
        alarms: The process's alarms (the position heartbeat's, so one ``Alarms`` per node).
        interval: Seconds between evaluations (the heartbeat's 10 s).
    """

    def __init__(
        self, node_id: str, store_dir: Path, max_age: float, alarms: Alarms, *, interval: float = 10.0
    ) -> None:
        self._node = node_id
        self._dir = store_dir
        self._max_age = max_age
        self.alarms = alarms
        self._interval = interval
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def evaluate(self) -> dict[str, Any] | None:
        """Read the newest complete manifest, set the gauge and the alarm; return the manifest or None."""
        newest = newest_manifest(self._dir)
        if newest is None:
            with contextlib.suppress(KeyError):
                _AGE.remove(self._node)  # none published if never taken (ES-82)
            self.alarms.set(
                "backup_age",
                True,
                newest=None,
                max_age_seconds=self._max_age,
                remedy="run `crewlet backup --dir PATH` against a data node",
            )
            return None
        age = max(0.0, time.time() - newest["taken_at"] / 1_000_000)
        _AGE.labels(node=self._node).set(round(age, 3))
        self.alarms.set(
            "backup_age",
            age > self._max_age,
            newest=newest["dir"],
            age_seconds=round(age, 1),
            max_age_seconds=self._max_age,
            remedy="run `crewlet backup --dir PATH` against a data node",
        )
        return newest

    async def _loop(self) -> None:
        while not self._stopping:
            try:
                await asyncio.to_thread(self.evaluate)
            except Exception as e:  # noqa: BLE001 - a bad file is logged; the next tick reads again
                _log.warning("backup_age_unread", error=f"{type(e).__name__}: {e}")
            waited = 0.0
            while not self._stopping and waited < self._interval:
                await asyncio.sleep(0.25)
                waited += 0.25

    def start(self) -> None:
        """Evaluate now and every ``interval`` seconds until :meth:`stop`."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="backup-age")

    async def stop(self) -> None:
        """Stop evaluating (the loop ends by its flag)."""
        self._stopping = True
        if self._task is not None:
            await self._task
            self._task = None
