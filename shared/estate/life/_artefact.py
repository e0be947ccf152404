"""A backup artefact on disk: its layout, its manifest read back, its copies and its destination
(ES-81, ES-83, ES-84).

Layout: ``store.db`` (the node-local file), ``store-replicated.db`` (the estate copy),
``objects/<key>`` (every object the copy names, :func:`object_file`) and ``manifest.json``, written
last. :func:`load_manifest` reads a manifest back, refusing a corrupt one as :class:`ManifestInvalid`
naming the field; :func:`copy_summary` and :func:`named_objects` read a copied file (the objects come
from each registered domain's ``backup_objects`` query). The copy itself (``VACUUM INTO``, out of WAL
mode, integrity and schema checks) and the destination checks are here; :mod:`._backup` orders them.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from ..domains import REGISTERED
from ._manifest import file_sha256

__all__ = [
    "FORMAT",
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
    "record_backup_dir",
    "sha256_file",
]


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


_RECORD_KEEP = 32


_SAFE_KEY = re.compile(r"^[A-Za-z0-9._=+-]+(/[A-Za-z0-9._=+-]+)*$")


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
