"""``crewlet config import --offline``: a revision stored in a stopped node's store (FL-109, FL-145).

Owns the store directory an offline command writes to (from ``--node F`` or ``--data-dir D``), the
refusal of a scratch store naming ``store.scratch``, and the offline import itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from shared.config import ConfigInvalid, Issue

from ._config_node import EXIT_REFUSED, EXIT_UNREACHABLE, fail

__all__ = ["SCRATCH_REFUSAL", "import_offline", "offline_store_dir", "refuse_scratch_store"]


SCRATCH_REFUSAL = (
    "store.scratch: true: this node's store is wiped at every boot, so an offline write would vanish "
    "(FL-145); configure the fleet through a data node's API instead (crewlet config import FILE --url U)"
)


def offline_store_dir(node_file: Path, data_dir: Path | None) -> Path:
    """The store directory an offline command writes to, from ``--node F`` (FL-145).

    Exits 2 when the node file is invalid, names another directory than ``--data-dir``, or sets
    ``store.scratch: true`` (the refusal names ``store.scratch``).
    """
    from shared.config import load_node_file

    try:
        cfg, _warnings = load_node_file(str(node_file))
    except ConfigInvalid as e:
        fail([i.line() for i in e.issues])
    if cfg.store.scratch:
        fail([f"{node_file}: {SCRATCH_REFUSAL}"])
    if data_dir is not None and data_dir.resolve() != cfg.store_dir.resolve():
        fail([f"--data-dir {data_dir} is not {node_file}'s store.dir ({cfg.store_dir}): give one of them"])
    return cfg.store_dir


def refuse_scratch_store(data_dir: Path) -> None:
    """Exit 2 naming ``store.scratch`` when ``data_dir`` is a scratch store (FL-145).

    A scratch node marks its store with ``.scratch`` at every boot (:mod:`crewlet.node`).
    """
    if (data_dir / ".scratch").exists():
        fail([f"{data_dir}: {SCRATCH_REFUSAL}"])


def import_offline(data_dir: Path, document: dict[str, Any], summary: str, *, compat: bool = False) -> None:
    """Store ``document`` in a stopped node's store (FL-109): the pointer moves at its next start.

    A scratch store is refused naming ``store.scratch`` (FL-145).
    """
    from shared import control  # the control plane; imported only when asked for
    from shared.errors import CrewletError, UsageError

    if not data_dir.is_dir():
        fail([f"{data_dir}: no such directory (give the node's store.dir, e.g. .crewlet/node-0)"])
    refuse_scratch_store(data_dir)
    try:
        store = control.node_store(data_dir)
        revision = control.offline_import(store, document, summary=summary, compat=compat)
    except CrewletError as e:
        lines = [i.line() for i in getattr(e, "issues", None) or [] if isinstance(i, Issue)]
        fail([*lines, f"{data_dir}: {e}"], EXIT_REFUSED if isinstance(e, UsageError) else EXIT_UNREACHABLE)
    except OSError as e:
        fail([f"{data_dir}: {e.strerror or e}"], EXIT_UNREACHABLE)
    typer.echo(
        f"revision {revision} stored in {store}; the fleet's pointer moves to it at that node's next start"
    )
