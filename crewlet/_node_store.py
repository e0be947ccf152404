"""A node's hold on its ``store.dir``: the exclusive lock file and the scratch wipe (FL-17, FL-145).

Boot step 0, before the listener: a second process on the same directory is refused (:class:`StoreInUse`),
and a ``store.scratch`` node starts from an empty directory. ``crewlet migrate`` takes the same lock.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import Any

from shared.errors import UsageError

__all__ = ["StoreInUse", "lock_store", "wipe_scratch"]


class StoreInUse(UsageError):
    """Another live process holds this node's ``store.dir`` (its lock file)."""


def lock_store(store_dir: Path) -> Any:
    """Take this node's exclusive lock on ``store.dir`` before anything touches it.

    A second process on the same directory would start a second broker on the live JetStream
    store and rewrite its files; it is refused here, naming the directory.

    Returns:
        The open lock file (held for the life of the process).

    Raises:
        StoreInUse: another process holds the lock.
        UsageError: the directory cannot be created (e.g. a file is in the way).
    """
    try:
        store_dir.mkdir(parents=True, exist_ok=True)
        handle = open(store_dir / ".lock", "a+")  # noqa: SIM115 - held until the process exits
    except OSError as e:
        raise UsageError(f"store.dir {store_dir}: {e.strerror or e}") from None
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise StoreInUse(
            f"store.dir {store_dir} is in use by {holder}: stop that node, or give this one another "
            "--data-dir / store.dir"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}\n")
    handle.flush()
    return handle


def wipe_scratch(store_dir: Path) -> None:
    """Empty a ``store.scratch`` node's directory but its lock file, and mark it scratch (FL-17, FL-145)."""
    for child in store_dir.iterdir():
        if child.name != ".lock":
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    # FL-145: offline commands pointed at this directory refuse it, naming store.scratch
    (store_dir / ".scratch").write_text("store.scratch: true (wiped at every boot)\n")
