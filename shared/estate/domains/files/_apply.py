"""How a ``file_put`` record is applied: a new version row of a project file (ES-74, CO-26).

The row names its bytes in the object store; an ``if_match`` that no longer holds is refused at
apply, in log order, so every copy refuses it alike (ES-16).
"""

from __future__ import annotations

from sqlalchemy import Connection

from ..._errors import NotFound, VersionConflict
from ...log._applier import ApplyOutcome
from ...log._record import Record
from ...store import _sql as sql
from ._tables import T_FILES

__all__ = ["apply_file_put"]


def apply_file_put(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
    """Apply one ``file_put`` record; a vanished project or a stale ``if_match`` is refused."""
    p = rec.payload
    fid = str(p["file_id"])
    if sql.one(conn, "SELECT 1 FROM projects WHERE id = ?", (p["project_id"],)) is None:
        return ApplyOutcome("file", fid, NotFound("project", str(p.get("project", ""))))
    current = sql.one(
        conn,
        "SELECT max(version) AS v FROM project_files WHERE project_id = ? AND path = ?",
        (p["project_id"], p["path"]),
    )
    version = int(current.v or 0) if current is not None else 0
    if p.get("if_match") is not None and int(p["if_match"]) != version:
        return ApplyOutcome(
            "file", fid, VersionConflict(f"{p['path']} is at version {version}, not {p['if_match']}", version)
        )
    sql.run(
        conn,
        "UPDATE project_files SET current = 0 WHERE project_id = ? AND path = ?",
        (p["project_id"], p["path"]),
    )
    sql.insert_row(
        conn,
        T_FILES,
        {
            "id": fid,
            "project_id": p["project_id"],
            "path": p["path"],
            "version": version + 1,
            "content_type": p.get("content_type") or "application/octet-stream",
            "size": int(p["size"]),
            "sha256": p["sha256"],
            "object_key": p["object_key"],
            "author": str(p.get("author") or ""),
            "author_kind": str(p.get("author_kind") or ""),
            "created_at": rec.at,
            "removed_at": None,
            "current": True,
        },
    )
    return ApplyOutcome("file", fid)
