"""Proving a backup restores, offline (ES-83): ``crewlet retention verify --restore``.

Owns :func:`verify_restore` and its checks (the newest artefact under a directory, its manifest, each
restored store file, the objects the manifest and the restored estate name), and the object check
``restore-objects`` runs before it writes (:func:`check_objects`). Talks to no node.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer

from shared.estate.life._backup import (
    FORMAT,
    MANIFEST,
    NODE_FILE,
    REPLICATED_FILE,
    ManifestInvalid,
    copy_summary,
    load_manifest,
    named_objects,
    sha256_file,
)

__all__ = ["FUTURE_SKEW", "age_text", "check_objects", "find_newest", "verify_restore", "when"]

FUTURE_SKEW = 300.0
"""Seconds a manifest's ``taken_at`` may lie ahead of this host's clock before ``verify`` fails it."""


def when(micros: int) -> str:
    """A manifest instant (µs since the epoch) as ``YYYY-mm-ddTHH:MM:SSZ``; an unrepresentable one as µs."""
    try:
        return datetime.fromtimestamp(micros / 1_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{micros} µs (not a representable date)"


def age_text(seconds: float) -> str:
    """``seconds`` as ``1.5d``, ``2.0h``, ``3.0m`` or ``40s``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def check_objects(d: Path, manifest: dict[str, Any]) -> list[str]:
    """The problems of the objects a checked manifest (:func:`load_manifest`) names, one per object."""
    problems = []
    for o in manifest["objects"]["items"]:
        path = d / o["file"]
        if not path.is_file():
            problems.append(f"object {o['key']} (file {o.get('named_by', '?')}) is missing: no {path}")
            continue
        size = path.stat().st_size
        sha = sha256_file(path)
        if size != o["size"] or sha != o["sha256"]:
            problems.append(
                f"object {o['key']} at {path} is {size} bytes sha256 {sha}; the manifest says "
                f"{o['size']} bytes sha256 {o['sha256']}"
            )
    return problems


def find_newest(root: Path) -> tuple[Path | None, list[Path], list[ManifestInvalid]]:
    """Return the newest artefact under ``root`` (``root`` itself may be one), the debris and the corrupt.

    An artefact is a directory holding a ``manifest.json`` that :func:`load_manifest` accepts; newest
    by ``taken_at``. Debris: a directory holding ``store.db`` or ``store-replicated.db`` but no
    manifest (an unfinished or failed backup). Corrupt: a ``manifest.json`` that is there but does not
    load (each error names the file and the field).
    """
    best: tuple[int, Path] | None = None
    debris: list[Path] = []
    corrupt: list[ManifestInvalid] = []
    candidates = [root, *sorted(p for p in root.rglob("*") if p.is_dir())]
    for d in candidates:
        try:
            m = load_manifest(d)
        except ManifestInvalid as e:
            corrupt.append(e)
            continue
        if m is not None:
            if best is None or m["taken_at"] > best[0]:
                best = (m["taken_at"], d)
        elif (d / NODE_FILE).exists() or (d / REPLICATED_FILE).exists():
            debris.append(d)
    return (best[1] if best else None), debris, corrupt


def _manifest_problems(m: dict[str, Any], now: float) -> list[str]:
    """What a loaded manifest's values say against it: format, node, a ``taken_at`` in the future."""
    problems = []
    if m.get("format") != FORMAT:
        problems.append(
            f"{MANIFEST}: field format is {m.get('format')!r}; this build writes and reads format {FORMAT}"
        )
    if not m.get("node"):
        problems.append(f"{MANIFEST}: field node is missing or empty: the backup names no node")
    ahead = m["taken_at"] / 1_000_000 - now
    if ahead > FUTURE_SKEW:
        problems.append(
            f"{MANIFEST}: field taken_at {m['taken_at']} ({when(m['taken_at'])}) is {age_text(ahead)} ahead of "
            "this host: taken in the future: clock skew or a forged manifest"
        )
    return problems


def _restored_objects(m: dict[str, Any], newest: Path, estate_copy: Path) -> list[str]:
    """Check the objects the restored estate copy names against the manifest and ``objects/``."""
    try:
        named = named_objects(estate_copy)
    except sqlite3.Error as e:
        return [f"{REPLICATED_FILE}: the objects it names cannot be read (project_files): {e}"]
    listed = {o["key"]: o for o in m["objects"]["items"]}
    problems = []
    for o in named:
        where = f"object {o['key']} (named by file {o['named_by']} in the restored estate)"
        item = listed.get(o["key"])
        if item is None:
            problems.append(f"{where} is not in {MANIFEST}: the manifest leaves it out")
            if not (newest / o["file"]).is_file():
                problems.append(f"{where} is missing: no {newest / o['file']}")
            continue
        if item["sha256"] != o["sha256"] or item["size"] != o["size"]:
            problems.append(
                f"{where}: the row says {o['size']} bytes sha256 {o['sha256']}; the manifest says "
                f"{item['size']} bytes sha256 {item['sha256']}"
            )
    return problems


def verify_restore(dir: Path, cadence_seconds: float) -> int:  # noqa: A002 - the spec's option name
    """Prove the newest backup under ``dir`` restores (ES-83); talks to no node.

    Restores the newest artefact (see :func:`find_newest`) into a scratch directory, checks both files'
    SHA-256 and size against the manifest, opens each (``PRAGMA integrity_check``, table count), reads
    the estate copy's positions and compares them with the manifest's, and checks every object the
    manifest names (present in ``objects/`` with its SHA-256). The manifest's list is not trusted
    alone: every object the *restored* estate copy names (its ``project_files`` rows, the list the
    backup itself took) must be in the manifest with the row's size and SHA-256, and present and
    verified under ``objects/``. Prints when and by whom it was taken, each store copy with its size
    and table count, and every domain's stream, generation and sequence.

    Args:
        dir: A backup directory or a directory holding backups.
        cadence_seconds: The newest backup may be at most this old (ES-83 default 30 days).

    Returns:
        The exit code: 0 verified and within the cadence; 1 no manifest under ``dir`` (debris only),
        a corrupt manifest (empty, not JSON, a field of the wrong type: one line naming the file and
        the field), a ``format`` this build does not write, no ``node``, a ``taken_at`` in the future
        (more than :data:`FUTURE_SKEW` ahead), a manifest naming no domain position, a
        SHA-256/size/integrity/position mismatch, a missing object or one the restored estate names
        that the manifest does not, or older than the cadence; 2 ``dir`` is not a directory.
    """
    if not dir.is_dir():
        typer.echo(f"{dir} is not a directory", err=True)
        return 2
    found = _newest_manifest(dir)
    if isinstance(found, int):
        return found
    newest, m = found
    now = time.time()
    problems = _manifest_problems(m, now)
    age = max(0.0, now - m["taken_at"] / 1_000_000)
    typer.echo(f"backup {newest}")
    typer.echo(
        f"  taken {when(m['taken_at'])} ({age_text(age)} ago) on node {m.get('node') or '?'}, "
        f"owner {m.get('owner') or '(unset)'}"
    )
    positions = m["positions"]
    if not positions:
        problems.append("the manifest names no domain position: it cannot be verified")
    with tempfile.TemporaryDirectory(prefix="crewlet-verify-") as scratch:
        for name in (NODE_FILE, REPLICATED_FILE):
            problems += _verify_copy(name, m, newest, Path(scratch))
    for domain, p in positions.items():
        typer.echo(f"  {domain}: {p['stream']} generation {p['generation']} seq {p['seq']}")
    items = m["objects"]["items"]
    object_problems = check_objects(newest, m)
    problems += object_problems
    typer.echo(f"  objects: {len(items)} named, {len(items) - len(object_problems)} verified")
    if age > cadence_seconds:
        problems.append(
            f"the newest backup is {age_text(age)} old; the cadence is {age_text(cadence_seconds)}"
        )
    for p in problems:
        typer.echo(f"FAILED: {p}", err=True)
    if problems:
        return 1
    typer.echo("verified: restorable")
    return 0


def _newest_manifest(dir: Path) -> tuple[Path, dict[str, Any]] | int:  # noqa: A002 - as verify_restore
    """The newest backup under ``dir`` and its checked manifest, or the exit code (1) once printed why not."""
    newest, debris, corrupt = find_newest(dir)
    for d in debris:
        typer.echo(f"debris (no manifest): {d}", err=True)
    for c in corrupt:  # it may be the newest backup: nothing under dir is proven restorable
        typer.echo(f"FAILED: {c}; the backup is not restorable", err=True)
    if corrupt:
        return 1
    if newest is None:
        typer.echo(
            f"no backup under {dir}: no manifest.json found (a directory without one is debris)", err=True
        )
        return 1
    try:
        loaded = load_manifest(newest)
    except ManifestInvalid as e:  # changed since it was found
        typer.echo(f"FAILED: {e}", err=True)
        return 1
    if loaded is None:
        typer.echo(f"FAILED: {newest / MANIFEST} vanished while verifying", err=True)
        return 1
    return newest, loaded


def _verify_copy(name: str, m: dict[str, Any], newest: Path, scratch: Path) -> list[str]:
    """Restore one store file into ``scratch`` and check it against the manifest; its problems.

    SHA-256 and size, ``integrity_check``, the table count; for the estate copy also its positions
    and the objects it names (:func:`_restored_objects`). Prints the file's line when it opens.
    """
    problems: list[str] = []
    want = m["files"].get(name)
    src = newest / name
    if want is None or not src.is_file():
        return [f"{name}: {'not in the manifest' if want is None else 'missing'}"]
    dst = scratch / name
    shutil.copyfile(src, dst)
    sha, size = sha256_file(dst), dst.stat().st_size
    if sha != want["sha256"] or size != want["size"]:
        return [
            f"{name}: {size} bytes sha256 {sha}; the manifest says {want['size']} bytes sha256 {want['sha256']}"
        ]
    try:
        summary = copy_summary(dst)
    except sqlite3.Error as e:
        return [f"{name}: does not open as SQLite: {e}"]
    typer.echo(f"  {name}: {size} bytes, {summary['tables']} tables, integrity {summary['integrity']}")
    if summary["integrity"] != "ok":
        problems.append(f"{name}: integrity_check says {summary['integrity']}")
    if summary["tables"] != want["tables"]:
        problems.append(f"{name}: {summary['tables']} tables; the manifest says {want['tables']}")
    if name == REPLICATED_FILE:
        for domain, p in m["positions"].items():
            got = summary["positions"].get(domain, {"seq": 0})
            if got.get("seq") != p["seq"]:
                problems.append(
                    f"{domain}: the copy's checkpoint is {got.get('seq')}; the manifest says {p['seq']}"
                )
        problems += _restored_objects(m, newest, dst)
    return problems
