"""A snapshot artefact's manifest and checks: what a copy holds and whether this build can adopt it
(ES-53, ES-56).

The manifest (``manifest.json``, see :mod:`._snapshot`) names the copy's file, size and sha256, the
build, every registered log's position read **out of the copy** (its ``statelog_checkpoint`` rows)
and its schema (``migrations``: every ordinary table and its columns, derived FTS tables left out).
:func:`incompatibility` is what a joiner refuses an artefact for.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
from importlib import metadata
from pathlib import Path
from typing import Any

from ..domains import LOGS
from ..log._ids import GENERATION, STREAMS
from ..log._record import RECORD_VERSION_READ
from ..store._schema import EstateModel

__all__ = [
    "MANIFEST",
    "SnapshotFailed",
    "build_schema",
    "build_version",
    "check_copy",
    "copy_positions",
    "copy_schema",
    "file_sha256",
    "incompatibility",
    "load_manifest",
]


MANIFEST = "manifest.json"
"""The manifest's file name inside ``store.snapshot_dir``."""


_FORMAT = 1


class SnapshotFailed(Exception):
    """A snapshot could not be taken or a fetched artefact did not check out (the reason is the message)."""


def build_version() -> str:
    """This build's version (the ``crewlet`` distribution's, ``0.0.0`` when not installed)."""
    try:
        return metadata.version("crewlet")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def build_schema() -> dict[str, list[str]]:
    """Table → sorted column names of this build's estate tables (what a joiner can read)."""
    return {name: sorted(c.name for c in t.columns) for name, t in EstateModel.metadata.tables.items()}


def copy_schema(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """Table → sorted column names of the file behind ``conn`` (FTS tables and their shadows left out)."""
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    virtual = [str(n) for n, sql in rows if str(sql or "").upper().startswith("CREATE VIRTUAL")]
    out: dict[str, list[str]] = {}
    for name, _sql in rows:
        name = str(name)
        if name.startswith("sqlite_") or any(name == v or name.startswith(v + "_") for v in virtual):
            continue
        cols = conn.execute(f'PRAGMA table_info("{name}")').fetchall()
        out[name] = sorted(str(c[1]) for c in cols)
    return dict(sorted(out.items()))


def copy_positions(conn: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    """Domain → ``{stream, generation, seq, applied_through, max_record_version, stream_created_at}``
    read from the ``statelog_checkpoint`` rows of the file behind ``conn`` (a domain without a row is
    at 0)."""
    out: dict[str, dict[str, Any]] = {
        d: {
            "stream": STREAMS[d],
            "generation": GENERATION,
            "seq": 0,
            "applied_through": 0,
            "max_record_version": 0,
            "stream_created_at": 0,
        }
        for d in LOGS
    }
    with contextlib.suppress(sqlite3.OperationalError):  # a file without the table: every log at 0
        for row in conn.execute(
            "SELECT domain, stream, generation, seq, applied_through, max_record_version, stream_created_at "
            "FROM statelog_checkpoint ORDER BY domain"
        ):
            out[str(row[0])] = {
                "stream": str(row[1]),
                "generation": int(row[2]),
                "seq": int(row[3]),
                "applied_through": int(row[4]),
                "max_record_version": int(row[5]),
                "stream_created_at": int(row[6]),
            }
    return out


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _fsync_path(path: Path) -> None:
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_copy(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """Open a copy read-only, ``PRAGMA integrity_check`` it and read its positions and schema.

    Returns:
        ``(positions, schema)`` as in the manifest.

    Raises:
        SnapshotFailed: the file is not a sound SQLite database.
    """
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise SnapshotFailed(f"cannot open {path.name}: {e}") from None
    try:
        verdict = [str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall()]
        if verdict != ["ok"]:
            raise SnapshotFailed(f"integrity_check of {path.name}: {'; '.join(verdict[:3])}")
        return copy_positions(conn), copy_schema(conn)
    except sqlite3.Error as e:
        raise SnapshotFailed(f"reading {path.name}: {e}") from None
    finally:
        conn.close()


def incompatibility(manifest: dict[str, Any]) -> str:
    """Why this build cannot adopt the artefact ``manifest`` describes (ES-56), or ``""`` when it can.

    Refused: a table or column this build lacks, a log whose rows were applied from a record version
    above :data:`~shared.estate._record.RECORD_VERSION_READ`, a generation other than this build's,
    or a manifest of an unknown format.
    """
    if manifest.get("format") != _FORMAT:
        return f"manifest format {manifest.get('format')!r} is not {_FORMAT}"
    have = build_schema()
    for table, cols in (manifest.get("migrations") or {}).items():
        if table not in have:
            return f"table {table} is unknown to this build"
        extra = sorted(set(cols) - set(have[table]))
        if extra:
            return f"columns {table}.{', '.join(extra)} are unknown to this build"
    for domain, pos in (manifest.get("positions") or {}).items():
        if int(pos.get("max_record_version", 0)) > RECORD_VERSION_READ:
            return (
                f"{domain} rows were applied from record version {pos['max_record_version']}, "
                f"above what this build reads ({RECORD_VERSION_READ})"
            )
        if int(pos.get("generation", GENERATION)) != GENERATION:
            return f"{domain} is at generation {pos.get('generation')}, this log at {GENERATION}"
    return ""


def load_manifest(snapshot_dir: Path) -> dict[str, Any] | None:
    """Return the artefact's manifest when it and its file are on disk (size as named), else None."""
    try:
        manifest = json.loads((snapshot_dir / MANIFEST).read_text())
        if (snapshot_dir / str(manifest["file"])).stat().st_size != int(manifest["bytes"]):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return manifest if isinstance(manifest, dict) else None
