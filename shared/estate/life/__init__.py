"""The estate's life over time: snapshots, donors, catch-up, trim, eviction, backup and the sweep.

Owns what happens to a copy and its logs beyond applying them (ES-8, ES-47..ES-59, ES-85, ES-86):
the snapshot keeper and its manifest, the donor and the below-the-log catch-up that installs a
peer's snapshot, the six trim terms and their conclusion, eviction and readmission gestures, the
backup of a node's files and objects with its age watch, and the ledger sweep. It works on whole
files and on the registered logs (:data:`shared.estate.domains.LOGS`), never on one domain's rows.
It may import :mod:`shared.estate.domains`, :mod:`shared.estate.log`, :mod:`shared.estate.store`
and the estate's base modules; nothing below imports it.
"""

from ._backup import BackupFailed, take_backup
from ._backup_age import BackupAgeWatch
from ._catchup import FETCH_PREFIX, OFFER_SUBJECT, OFFER_WINDOW, CatchUp, SnapshotDonor
from ._evict import GestureRefused, run_gesture
from ._manifest import MANIFEST, load_manifest
from ._snapshot import RETRY_AFTER, SnapshotKeeper
from ._sweep import LedgerSweeper, record_watermark, sweep_ledger
from ._trim import TERMS, TrimConclusion, conclude, read_backup_floor

__all__ = [
    "FETCH_PREFIX",
    "MANIFEST",
    "OFFER_SUBJECT",
    "OFFER_WINDOW",
    "RETRY_AFTER",
    "TERMS",
    "BackupAgeWatch",
    "BackupFailed",
    "CatchUp",
    "GestureRefused",
    "LedgerSweeper",
    "SnapshotDonor",
    "SnapshotKeeper",
    "TrimConclusion",
    "conclude",
    "load_manifest",
    "read_backup_floor",
    "record_watermark",
    "run_gesture",
    "sweep_ledger",
    "take_backup",
]
