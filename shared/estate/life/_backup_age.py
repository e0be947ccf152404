"""The ``backup_age`` alarm (ES-82, ES-92): how old this node's newest complete backup is.

Each backup directory this node wrote is recorded in ``<store.dir>/backups.json``;
:class:`BackupAgeWatch` reads the newest complete ``manifest.json`` among them on its tick, publishes
``crewlet_backup_age_seconds{node}`` and raises the alarm when there is none or it is older than
``retention.backup_max_age``. A deleted manifest counts as none, whatever a counter said.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

from shared import logs

from .._alarms import Alarms
from ._artefact import newest_manifest
from ._backup import _gauge

__all__ = ["BackupAgeWatch"]

_log = logs.get("backup")


_AGE = _gauge(
    "crewlet_backup_age_seconds", "Age of the newest complete backup manifest on disk (ES-82)", ("node",)
)


class BackupAgeWatch:
    """The ``backup_age`` alarm and the ``crewlet_backup_age_seconds`` gauge of one data node (ES-82, ES-92).

    Args:
        node_id: This node's id (the gauge's label).
        store_dir: ``store.dir`` (where ``backups.json`` records this node's backup directories).
        max_age: ``retention.backup_max_age`` in seconds.
        alarms: The process's alarms (the position heartbeat's, so one ``Alarms`` per node).
        interval: Seconds between evaluations (the heartbeat's 10 s).
    """

    def __init__(
        self, node_id: str, store_dir: Path, max_age: float, alarms: Alarms, *, interval: float = 10.0
    ) -> None:
        self._node = node_id
        self._dir = store_dir
        self._max_age = max_age
        self.alarms = alarms
        self._interval = interval
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def evaluate(self) -> dict[str, Any] | None:
        """Read the newest complete manifest, set the gauge and the alarm; return the manifest or None."""
        newest = newest_manifest(self._dir)
        if newest is None:
            with contextlib.suppress(KeyError):
                _AGE.remove(self._node)  # none published if never taken (ES-82)
            self.alarms.set(
                "backup_age",
                True,
                newest=None,
                max_age_seconds=self._max_age,
                remedy="run `crewlet backup --dir PATH` against a data node",
            )
            return None
        age = max(0.0, time.time() - newest["taken_at"] / 1_000_000)
        _AGE.labels(node=self._node).set(round(age, 3))
        self.alarms.set(
            "backup_age",
            age > self._max_age,
            newest=newest["dir"],
            age_seconds=round(age, 1),
            max_age_seconds=self._max_age,
            remedy="run `crewlet backup --dir PATH` against a data node",
        )
        return newest

    async def _loop(self) -> None:
        while not self._stopping:
            try:
                await asyncio.to_thread(self.evaluate)
            except Exception as e:  # noqa: BLE001 - a bad file is logged; the next tick reads again
                _log.warning("backup_age_unread", error=f"{type(e).__name__}: {e}")
            waited = 0.0
            while not self._stopping and waited < self._interval:
                await asyncio.sleep(0.25)
                waited += 0.25

    def start(self) -> None:
        """Evaluate now and every ``interval`` seconds until :meth:`stop`."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="backup-age")

    async def stop(self) -> None:
        """Stop evaluating (the loop ends by its flag)."""
        self._stopping = True
        if self._task is not None:
            await self._task
            self._task = None
