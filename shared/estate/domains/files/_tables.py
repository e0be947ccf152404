"""The files domain's table (ES-74, CO-26): ``project_files``, one row per file version."""

from __future__ import annotations

from sqlalchemy import UniqueConstraint
from sqlmodel import Field

from ...store._schema import EstateModel, table_of

__all__ = ["ProjectFile", "T_FILES"]


class ProjectFile(EstateModel, table=True):
    """``project_files`` (ES-74, CO-26): one row per file version; ``current`` marks the newest."""

    __tablename__ = "project_files"
    __table_args__ = (UniqueConstraint("project_id", "path", "version"),)
    id: str = Field(primary_key=True)
    project_id: str = Field(index=True)
    path: str
    version: int
    content_type: str = "application/octet-stream"
    size: int
    sha256: str
    object_key: str
    author: str = ""
    author_kind: str = ""
    created_at: int
    removed_at: int | None = None
    current: bool = True


T_FILES = table_of(ProjectFile)
