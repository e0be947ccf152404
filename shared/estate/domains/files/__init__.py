"""The files domain: project file rows naming bytes in the object store (ES-70, ES-74, CO-26).

Owns the table ``project_files``, the operations ``files.put``, ``files.list`` and ``files.get`` and
the record kind ``file_put``. Its rows ride the ``tracker`` log (the wire of ES-74: a file row is a
tracker record), so it has no log, applier or checkpoint of its own. The backup fetches the objects
its rows name. It may import :mod:`shared.estate.log`, :mod:`shared.estate.store`, the estate's
base modules, and the tracker domain (its rows belong to projects).
"""

from __future__ import annotations

from .._seam import EstateDomain, ReadOp, WriteOp
from ._apply import apply_file_put
from ._files import (
    MAX_FILE,
    decide_file_put,
    file_row_view,
    get_file,
    list_files,
    object_key_for,
    validate_path,
)
from ._tables import ProjectFile

__all__ = ["DOMAIN", "MAX_FILE", "object_key_for", "validate_path"]

NAMED_OBJECTS = (
    "SELECT f.object_key, f.sha256, f.size, f.path, f.version, coalesce(p.key, f.project_id) "
    "FROM project_files f LEFT JOIN projects p ON p.id = f.project_id "
    "WHERE f.object_key != '' ORDER BY f.object_key, f.project_id, f.path, f.version"
)
"""Every object a file row names, with the row naming it (what a backup must fetch, ES-86)."""

DOMAIN = EstateDomain(
    name="files",
    log="tracker",
    tables=(ProjectFile,),
    writes={"files.put": WriteOp(decide_file_put, file_row_view)},
    reads={
        "files.list": ReadOp(lambda c, r, a: list_files(c, a)),
        "files.get": ReadOp(lambda c, r, a: get_file(c, a)),
    },
    apply={"file_put": apply_file_put},
    backup_objects=NAMED_OBJECTS,
)
