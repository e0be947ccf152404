"""The estate's life-over-time keys of the node file (ES-47..ES-59, ES-81..ES-86; Tier A).

Where they live (our choice, following the spec's names):

```yaml
store:
  snapshot_dir: ""            # "" = <store.dir>/snapshots (ES-53); refused on a node without data (ES-2)
stream:
  tracker_retention:
    snapshot_interval: 24h    # ES-53: no more often than this
    min_age: 7d               # ES-47 age_floor; allowed 24h..90d (ES-52)
    rejoin_window: 30m        # ES-59
retention:
  backup_floor: engine        # engine | operator (ES-49)
  backup_max_age: 24h         # ES-49
  backup_owner: ""            # named in the remedy and the manifest (ES-49)
  trim_tick: 15m              # ES-48: the worker:retention tick
  ledger_days: 30             # ES-8 / ES-85: operation ledger horizon
  inbox_retention_days: 365   # ES-85: 30..3650
  wal_limit_bytes: 67108864   # the estate WAL's journal_size_limit (bounded storage; ours)
  checkpoint_interval: 30s    # how often the estate WAL is checkpointed (ours)
```

A duration is a number of seconds or ``<n>ms|s|m|h|d`` (``90s``, ``30m``, ``24h``, ``7d``).

Short timings for tests and demos: ``min_age`` is held to 24 h..90 d (ES-52) unless the
environment sets ``CREWLET_RETENTION_TEST_TIMINGS=1``; then anything from one second is
accepted, so a test fleet can trim records written seconds ago. A node booted that way logs
``retention_test_timings`` (never set it in production: the age term is what keeps a day of log
for a node that restarts slowly).
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

__all__ = [
    "DURATION_RE",
    "TEST_TIMINGS_ENV",
    "Duration",
    "RetentionConfig",
    "TrackerRetention",
    "parse_duration",
    "test_timings",
]

DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
TEST_TIMINGS_ENV = "CREWLET_RETENTION_TEST_TIMINGS"
"""Environment switch that lowers ``min_age``'s lower bound to one second (tests, demos)."""
SNAPSHOTS_KEPT = 1
"""ES-52: one artefact per node."""
MIN_AGE_RANGE = (86_400.0, 90 * 86_400.0)
"""ES-52: ``min_age`` is allowed from 24 h to 90 days."""


def parse_duration(value: Any) -> float:
    """Return seconds for ``value``: a number (seconds) or ``<n>ms|s|m|h|d``.

    Raises:
        ValueError: anything else (pydantic reports it against the key).
    """
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or text like 30s, 15m, 24h, 7d")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (m := DURATION_RE.match(value)):
        seconds = float(m.group(1)) * _UNIT[m.group(2)]
    else:
        raise ValueError(f"{value!r} is not a duration: use seconds or text like 30s, 15m, 24h, 7d")
    if seconds <= 0:
        raise ValueError("a duration must be above zero")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]
"""Seconds, written as a number or ``30s``/``15m``/``24h``/``7d`` in the file."""


def test_timings() -> bool:
    """True when :data:`TEST_TIMINGS_ENV` is ``1`` (short ``min_age`` allowed)."""
    return os.environ.get(TEST_TIMINGS_ENV, "") == "1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TrackerRetention(_Strict):
    """``stream.tracker_retention`` (ES-52, ES-53, ES-59); every field in seconds.

    Attributes:
        snapshot_interval: A node takes a snapshot no more often than this (24 h).
        min_age: The trim keeps every record younger than this (7 d; 24 h..90 d, ES-52).
        rejoin_window: The budget for a node to become a full copy (30 min, ES-59).
    """

    snapshot_interval: Duration = 86_400.0
    min_age: Duration = 7 * 86_400.0
    rejoin_window: Duration = 1_800.0


class RetentionConfig(_Strict):
    """``retention``: the trim, backups and per-node sweeps (ES-8, ES-48, ES-49, ES-85).

    Attributes:
        backup_floor: ``engine`` counts verified backups this fleet announced; ``operator`` needs
            ``crewlet retention ack`` (ES-49).
        backup_max_age: A newest backup older than this blocks the trim and raises ``backup_age``
            (seconds; 24 h).
        backup_owner: Who keeps the backups (free text; named in the remedy and the manifest).
        trim_tick: Seconds between ``worker:retention`` ticks (15 min, ES-48).
        ledger_days: Operation ledger horizon in days (30, ES-8).
        inbox_retention_days: Inbox rows older than this are swept (365; 30..3650, ES-85).
        wal_limit_bytes: The estate file's ``journal_size_limit``: after a checkpoint the WAL is
            truncated to at most this many bytes (64 MiB; ours).
        checkpoint_interval: Seconds between WAL checkpoints of the estate file (30 s; ours).
    """

    backup_floor: Literal["engine", "operator"] = "engine"
    backup_max_age: Duration = 86_400.0
    backup_owner: str = ""
    trim_tick: Duration = 900.0
    ledger_days: Annotated[float, Field(gt=0, le=3650)] = 30.0
    inbox_retention_days: Annotated[float, Field(ge=30, le=3650)] = 365.0
    wal_limit_bytes: Annotated[int, Field(ge=1 << 20)] = 64 << 20
    checkpoint_interval: Duration = 30.0
