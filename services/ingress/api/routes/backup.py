"""Backups through the API (ES-81, ES-82): ``POST /backup?dir=PATH`` and ``GET /backups``.

- ``POST /backup?dir=PATH`` (grant ``fleet:operate``; always token-guarded): this node writes a backup
  into ``PATH`` on its own host (:func:`shared.estate.take_backup`). The ingress role always sits on a
  data node (the pairing rule), so the route uses this node's own estate, ``ctx.extras["estate"]``; it
  never asks another node. Answers: 201 with the manifest; 422 ``invalid`` (field ``dir``) for a
  missing, repeated (``?dir=`` given twice: ambiguous) or relative path, one that is a file, one the
  host cannot name (a component too long, an embedded NUL byte) or cannot write into (read-only, not
  permitted); 507 ``backup_no_space`` when the destination's disk is full, before or midway (what the
  backup wrote is removed); 409 ``backup_destination_not_empty`` naming the
  directory, ``backup_in_progress``, ``backup_below_log`` (the log was trimmed past the copy: no
  manifest); 503 ``estate_partition_not_served`` when a copy is out of service, ``not_ready`` before
  the estate is open, ``backup_hold_unavailable`` / ``objects_unavailable``; 502
  ``backup_object_missing`` / ``backup_object_corrupt`` naming the object and the file row naming it;
  500 ``backup_copy_failed`` (integrity or schema check, another I/O failure, named). Bad input is
  never a 500. Every failure leaves no manifest, and nothing the backup wrote.
- ``GET /backups`` (grant ``state:read``): the ``backups`` coordination slot, one announcement per
  node that took one: ``{"backups": [{"node", "taken_at", "dir", "owner", "verified", "positions"}]}``;
  ``dir`` is the resolved absolute path (``Path.resolve()``), not the path as typed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request

from shared import estate, objects
from shared.runtime import NodeContext, api_error, require_grant

from ...files import object_store_of
from ._common import add

__all__ = ["router"]


class BackupRoutes:
    """The backup endpoints over this node's own estate copy."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    async def backup(self, request: Request, dir: str | None = None) -> dict[str, Any]:  # noqa: A002 - the spec's name
        if len(request.query_params.getlist("dir")) > 1:
            raise api_error(
                422,
                "invalid",
                {
                    "field": "dir",
                    "message": "?dir= given more than once: ambiguous; give one absolute directory",
                },
            )
        if not dir:
            raise api_error(
                422, "invalid", {"field": "dir", "message": "give ?dir=PATH: an absolute directory"}
            )
        dest = Path(dir)
        if not dest.is_absolute():
            raise api_error(
                422,
                "invalid",
                {"field": "dir", "message": f"{dir!r} is relative; give an absolute directory on this node"},
            )
        est = self.ctx.extras.get("estate")
        if est is None:
            raise api_error(
                503,
                "not_ready",
                f"{self.ctx.node_id} has no open estate copy (not a data node, or still starting)",
                headers={"Retry-After": "5"},
            )
        try:
            store = await object_store_of(self.ctx)
        except objects.ObjectsError as e:
            raise api_error(503, "objects_unavailable", str(e)) from None
        try:
            return await estate.take_backup(
                est,
                node_id=self.ctx.node_id,
                dest=dest,
                store_dir=self.ctx.cfg.store_dir,
                objects=store,
                coord=self.ctx.coord,
                owner=self.ctx.cfg.retention.backup_owner,
                stream_type=self.ctx.cfg.stream.type,
            )
        except estate.BackupFailed as e:
            if e.code == "backup_destination_invalid":
                raise api_error(422, "invalid", {"field": "dir", "message": e.message}) from None
            raise api_error(e.status, e.code, e.message) from None

    async def backups(self) -> dict[str, Any]:
        if self.ctx.coord is None:
            raise api_error(503, "coordination_unavailable", "this node has no coordination store open")
        try:
            entries = await self.ctx.coord.entries("backups")
        except Exception as e:  # noqa: BLE001 - the store not answering is named, never a 500
            raise api_error(503, "coordination_unavailable", f"{type(e).__name__}: {e}") from None
        out = []
        for entry in entries:
            try:
                out.append(json.loads(entry.value))
            except ValueError:
                out.append({"node": entry.key, "unreadable": True})
        return {"backups": out}


def router(ctx: NodeContext) -> APIRouter:
    """Build the backup routes."""
    r = APIRouter(tags=["backup"])
    operate = [Depends(require_grant(ctx.cfg, "fleet:operate"))]
    read = [Depends(require_grant(ctx.cfg, "state:read"))]
    h = BackupRoutes(ctx)
    add(r, "/backup", h.backup, methods=["POST"], status_code=201, dependencies=operate)
    add(r, "/backups", h.backups, methods=["GET"], dependencies=read)
    return r
