"""This node's own record of the company it serves, and the offline import (FL-109).

Two files under ``<store.dir>/control/`` (mode 0600, plain JSON: the document as written, with its
``${NAME}`` references; no resolved secret is ever written here):

- ``active.json``: the revision this node last applied, with its epoch and activation instant.
  At the next start, a fleet with no pointer gets this revision published (a restarted single
  node points at what it served).
- ``pending.json``: an offline ``crewlet config import`` (no node running). At that node's next
  start the revision is published when it is newer than the fleet's pointer, then becomes
  ``active.json`` once applied.

A scratch node (``store.scratch``) wipes its store at every boot, so it has neither: it converges on
the fleet.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared import logs

from ._errors import ControlUsageError
from ._records import Revision, new_revision_id, now_iso

__all__ = ["LocalRecord", "LocalRevision", "node_store", "offline_import"]

_log = logs.get("control")


@dataclass(frozen=True)
class LocalRevision:
    """What the local record holds.

    Attributes:
        revision: The revision (document included).
        epoch: The epoch it was applied at (0 for a pending offline import).
        activated_at: Its activation instant in ms (an offline import: when it was written).
        pending: True for an offline import not yet published.
    """

    revision: Revision
    epoch: int
    activated_at: int
    pending: bool


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _revision_data(revision: Revision) -> dict[str, Any]:
    return {**revision.meta(), "document": revision.document}


def _revision_from(data: dict[str, Any]) -> Revision:
    return Revision.from_meta({"source": "offline", **data}, dict(data["document"]))


class LocalRecord:
    """The files under ``<store.dir>/control/`` (FL-109).

    Args:
        store_dir: The node's ``store.dir``.
    """

    def __init__(self, store_dir: Path) -> None:
        self.dir = Path(store_dir) / "control"

    def read(self) -> LocalRevision | None:
        """The pending offline import if any, else the revision last applied, else None.

        A file that does not parse is logged ``config_local_record_unreadable`` and ignored.
        """
        for name, pending in (("pending.json", True), ("active.json", False)):
            path = self.dir / name
            if not path.exists():
                continue
            try:
                data = json.loads(path.read_text())
                return LocalRevision(
                    revision=_revision_from(data["revision"]),
                    epoch=int(data.get("epoch", 0)),
                    activated_at=int(data.get("activated_at", 0)),
                    pending=pending,
                )
            except (OSError, ValueError, KeyError, TypeError) as e:
                _log.warning("config_local_record_unreadable", path=str(path), error=str(e))
        return None

    def write(self, revision: Revision, *, epoch: int, activated_at: int) -> None:
        """Record the revision this node applied (and clear a pending import it superseded)."""
        try:
            _write_json(
                self.dir / "active.json",
                {"revision": _revision_data(revision), "epoch": epoch, "activated_at": activated_at},
            )
            pending = self.dir / "pending.json"
            if pending.exists():
                pending.unlink()
        except OSError as e:
            _log.warning("config_local_record_failed", error=str(e))


def node_store(path: Path) -> Path:
    """The node store ``path`` names: itself when it holds a node's ``.lock``, else its one node
    subdirectory (``crewlet run --data-dir D`` keeps the store in ``D/<node id>``).

    Raises:
        ControlUsageError: no node store there, or several (name one).
    """
    if (path / ".lock").exists():
        return path
    stores = sorted(p for p in path.iterdir() if (p / ".lock").exists()) if path.is_dir() else []
    if len(stores) == 1:
        return stores[0]
    if not stores:
        raise ControlUsageError(
            f"--data-dir {path}: no node store there (a node's store.dir holds a .lock file; "
            "`crewlet run --data-dir D` keeps it in D/<node id>, e.g. D/node-0)"
        )
    names = ", ".join(str(p) for p in stores)
    raise ControlUsageError(f"--data-dir {path} holds several node stores ({names}): name one")


def _refuse_if_running(store: Path) -> None:
    """Refuse an offline import into a store a live node holds (its lock file, FL-109)."""
    try:
        handle = open(store / ".lock", "a+")  # noqa: SIM115 - closed below
    except OSError as e:
        raise ControlUsageError(f"{store}: {e.strerror or e}") from None
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise ControlUsageError(
            f"{store} is held by a running node: import through it instead "
            "(`crewlet config import FILE` with CREWLET_URL), or stop it first"
        ) from None
    finally:
        handle.close()  # closing drops the lock


def offline_import(store_dir: Path, document: dict[str, Any], *, summary: str, compat: bool = False) -> str:
    """Store a revision for a stopped node (FL-109): the pointer moves at that node's next start.

    The caller validates the document first (``crewlet config import --offline``). The revision's
    parent is the one the node last applied.

    Args:
        store_dir: The node's ``store.dir`` (``.crewlet/node-0``), or the ``--data-dir`` of
            ``crewlet run`` when it holds exactly one node store.
        document: The company document as written.
        summary: What changed.
        compat: It was validated with the compatibility rules (CO-43).

    Returns:
        The new revision id.

    Raises:
        ControlUsageError: no node store there, several, or a running node holds it.
        OSError: the directory cannot be written.
    """
    store = node_store(Path(store_dir))
    _refuse_if_running(store)
    previous = LocalRecord(store).read()
    revision = Revision(
        revision_id=new_revision_id(),
        document=document,
        summary=summary,
        source="offline",
        created_by=os.environ.get("USER", "") or "not recorded",
        created_by_kind="operator",
        created_at=now_iso(),
        parent_revision_id=previous.revision.revision_id if previous is not None else None,
        compat=compat,
    )
    _write_json(
        store / "control" / "pending.json",
        {"revision": _revision_data(revision), "epoch": 0, "activated_at": int(time.time() * 1000)},
    )
    return revision.revision_id
