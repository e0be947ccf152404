"""Project file rows: replicated state naming bytes in the shared object store (ES-70, ES-74, CO-26).

The row — project, path, version, type, size, sha256, author, object key — is a tracker record (kind
``file_put``, record version 14 because it names an object). The bytes never enter the estate: an
upload stores the object first and appends the row second, so a listed file always has its bytes.
Objects are content-addressed (``sha256/<2 hex>/<sha256>``, CO-26): identical bytes are stored once.
A new version is a new row; the newest is ``current``.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from sqlalchemy import Connection, select

from shared.text import hidden_character

from ..._errors import InvalidField, NotFound, VersionConflict
from ...log._decide import DecideCtx, Decision, anchor_of, derived_id, iso
from ...log._ids import object_subject
from ..tracker._decide import project_by_key
from ..tracker._tables import T_PROJECTS
from ._tables import T_FILES

__all__ = [
    "MAX_FILE",
    "PATH_LIMIT",
    "decide_file_put",
    "file_view",
    "get_file",
    "list_files",
    "object_key_for",
    "validate_path",
]

PATH_LIMIT = 512
"""Longest file path in characters (CO-26)."""
MAX_FILE = 100 * 1024 * 1024
"""Largest upload in bytes (CO-26: object ≤ 100 MiB)."""
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")


def validate_path(path: str) -> str:
    """Return ``path`` when it is a relative POSIX path inside its project (CO-26).

    Refused: empty, longer than 512 characters, absolute (``/a``), a backslash, a ``.`` or ``..``
    segment, an empty segment (``a//b``), a control character, or a bidirectional control
    (U+202A..U+202E, U+2066..U+2069: ``\u202etxt.exe`` reads as ``exe.txt``, issue 38).

    Raises:
        InvalidField: naming ``path`` with the rule it breaks.
    """
    if not isinstance(path, str) or not path:
        raise InvalidField("path", "a file path is required")
    if len(path) > PATH_LIMIT:
        raise InvalidField("path", f"is {len(path)} characters; the limit is {PATH_LIMIT}")
    if path.startswith("/"):
        raise InvalidField("path", f"{path!r} is absolute; give a path relative to the project")
    if (why := hidden_character(path)) is not None:
        raise InvalidField("path", f"{why}; a path must read as it is stored")
    if "\ufffd" in path:
        raise InvalidField("path", f"{path!r} holds bytes that are not UTF-8")
    if "\\" in path or any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise InvalidField("path", f"{path!r} holds a backslash or a control character")
    for seg in path.split("/"):
        if seg in ("..", "."):
            raise InvalidField("path", f"{path!r} tries to leave its project ({seg!r} segment)")
        if seg == "":
            raise InvalidField("path", f"{path!r} has an empty segment")
    return path


def object_key_for(sha256: str) -> str:
    """Return the content address of bytes whose SHA-256 is ``sha256``: ``sha256/<2 hex>/<sha256>``."""
    return f"sha256/{sha256[:2]}/{sha256}"


def file_view(row: Any, project_key: str) -> dict[str, Any]:
    """Render one file row."""
    return {
        "project": project_key,
        "path": row.path,
        "version": row.version,
        "size": row.size,
        "sha256": row.sha256,
        "content_type": row.content_type,
        "object_key": row.object_key,
        "author": row.author,
        "author_kind": row.author_kind,
        "updated_at": iso(row.created_at),
        "id": row.id,
    }


def _current(conn: Connection, project_id: str, path: str) -> Any:
    return conn.execute(
        select(T_FILES).where(
            T_FILES.c.project_id == project_id,
            T_FILES.c.path == path,
            T_FILES.c.current == True,  # noqa: E712
        )
    ).first()


def file_row_view(conn: Connection, file_id: str) -> dict[str, Any]:
    """Return the file row ``file_id`` (the answer of a row write)."""
    row = conn.execute(select(T_FILES).where(T_FILES.c.id == file_id)).first()
    if row is None:
        return {"id": file_id}
    key = conn.execute(select(T_PROJECTS.c.key).where(T_PROJECTS.c.id == row.project_id)).scalar()
    return file_view(row, str(key))


def decide_file_put(conn: Connection, ctx: DecideCtx, args: dict[str, Any]) -> Decision:
    """Decide a file row ``{project, path, size, sha256, object_key, content_type?, if_match?}``.

    Identical content at the current version answers the current row without writing.

    Raises:
        InvalidField: a malformed path, size, digest or object key; NotFound: unknown project.
        VersionConflict: ``if_match`` is not the path's current version (0 = must not exist yet).
    """
    project = project_by_key(conn, str(args.get("project") or ""))
    path = validate_path(str(args.get("path") or ""))
    size = args.get("size")
    if not isinstance(size, int) or size <= 0:
        raise InvalidField("content", "an empty file is refused; upload at least one byte")
    sha = str(args.get("sha256") or "")
    if not _SHA_RE.match(sha):
        raise InvalidField("sha256", "must be 64 lower-case hex digits")
    object_key = str(args.get("object_key") or "")
    if not object_key:
        raise InvalidField("object_key", "the stored object's key is required (store the object first)")
    content_type = str(args.get("content_type") or "application/octet-stream")
    cur = _current(conn, project.id, path)
    if_match = args.get("if_match")
    version = int(cur.version) if cur is not None else 0
    if if_match is not None and if_match != version:
        raise VersionConflict(f"{path} is at version {version}, not {if_match}", version)
    if cur is not None and cur.sha256 == sha and cur.content_type == content_type:
        return Decision("file", str(cur.id), noop=file_view(cur, project.key))
    obj = hashlib.sha256(f"{project.id}\x1f{path}".encode()).hexdigest()[:32]
    subject = object_subject("tracker", "file", obj)
    fid = derived_id("file", ctx.op_id)
    payload = {
        "file_id": fid,
        "project_id": project.id,
        "project": project.key,
        "path": path,
        "size": size,
        "sha256": sha,
        "object_key": object_key,
        "content_type": content_type,
        "if_match": if_match,
        "author": str(args.get("author") or ""),
        "author_kind": str(args.get("author_kind") or "operator"),
    }
    rec = ctx.record(
        kind="file_put",
        domain="tracker",
        subject=subject,
        payload=payload,
        scope=(f"file:{obj}", f"project:{project.key}"),
        version=14,
    )
    return Decision("file", fid, rec, expect=anchor_of(conn, "tracker", subject))


def list_files(conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
    """``list_files{project, prefix?}``: the current version of every file, by path.

    Raises:
        InvalidField, NotFound: malformed or unknown project.
    """
    project = project_by_key(conn, str(args.get("project") or ""))
    q = select(T_FILES).where(T_FILES.c.project_id == project.id, T_FILES.c.current == True)  # noqa: E712
    prefix = args.get("prefix")
    rows = conn.execute(q.order_by(T_FILES.c.path)).all()
    files = [file_view(r, project.key) for r in rows if not prefix or str(r.path).startswith(str(prefix))]
    return {"project": project.key, "files": files, "count": len(files)}


def get_file(conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
    """``{project, path, version?}`` → the row (current when no version).

    Raises:
        InvalidField, NotFound: malformed input, unknown project, or no such file/version.
    """
    project = project_by_key(conn, str(args.get("project") or ""))
    path = validate_path(str(args.get("path") or ""))
    version = args.get("version")
    if version is None:
        row = _current(conn, project.id, path)
    else:
        if not isinstance(version, int) or version < 1:
            raise InvalidField("version", "must be a positive integer")
        row = conn.execute(
            select(T_FILES).where(
                T_FILES.c.project_id == project.id, T_FILES.c.path == path, T_FILES.c.version == version
            )
        ).first()
    if row is None:
        raise NotFound("file", f"{project.key}/{path}" + (f"@{version}" if version else ""))
    return file_view(row, project.key)
