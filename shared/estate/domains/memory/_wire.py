"""What a memory record looks like on the wire (AG-1): tables, subjects, keys and the two kinds.

Every node that writes memory (the holder's tools, the reflect dispatcher, the learning duty) builds
its records here; every data node's applier reads them. A record is ``memory_put`` (the whole row)
or ``memory_tombstone`` (the subject's row is gone), at most 64 KiB encoded.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Any

from ..._errors import InvalidField, TooLarge
from ...log._ids import GENERATION, derive_op_id, mint_op_id
from ...log._record import Record

__all__ = [
    "IMMUTABLE",
    "MAX_MEMORY_RECORD",
    "MEMORY_SUBJECTS",
    "MUTABLE",
    "TABLES",
    "diary_id",
    "memory_key",
    "memory_record",
    "memory_subject",
    "parse_subject",
]

IMMUTABLE = ("agent_diary", "episodes", "synthesized_skill_versions")
"""Tables whose rows are created once: the first writer fleet-wide wins (expected last subject
sequence 0); later stamps on such a row are compare-and-set updates (AG-1)."""

MUTABLE = ("counterparty_profiles", "synthesized_skills", "agent_onboarding_markers")
"""Tables whose rows change by compare-and-set on the sequence the writer read (AG-1)."""

TABLES = IMMUTABLE + MUTABLE
"""AG-1's six tables."""

MAX_MEMORY_RECORD = 64 * 1024
"""Largest encoded memory record in bytes (AG-1 [ours])."""

MEMORY_SUBJECTS = "crewlet.memory.>"
"""The row subjects ``CREWLET_MEMORY`` carries besides the statelog's barrier and gate subjects."""

_HANDLE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_DIARY_NS = uuid.UUID("6f1d2c3a-5b4e-4f7a-9c8d-1e2f3a4b5c6d")


def memory_key(*natural_key: str) -> str:
    """Return the subject key of a natural key: 32 hex of SHA-256 over its parts (AG-1)."""
    return hashlib.sha256("\x1f".join(natural_key).encode()).hexdigest()[:32]


def memory_subject(handle: str, table: str, *natural_key: str) -> str:
    """Return ``crewlet.memory.<handle>.<table>.<key>`` for one row (AG-1).

    Raises:
        InvalidField: ``handle`` is not a seat handle (letters, digits, ``_``, ``-``; ≤ 64) or
            ``table`` is not one of :data:`TABLES`.
    """
    if not _HANDLE.match(handle or ""):
        raise InvalidField("handle", f"{handle!r} is not a seat handle")
    if table not in TABLES:
        raise InvalidField("table", f"{table!r} is not a memory table ({', '.join(TABLES)})")
    return f"crewlet.memory.{handle}.{table}.{memory_key(*natural_key)}"


def parse_subject(subject: str) -> tuple[str, str, str] | None:
    """Return ``(handle, table, key)`` of a row subject, or None for any other subject."""
    parts = subject.split(".")
    if len(parts) != 5 or parts[:2] != ["crewlet", "memory"]:
        return None
    return parts[2], parts[3], parts[4]


def diary_id(agent_id: str, content: str) -> str:
    """Return a diary entry's id: uuid5(agent id, content as written) — byte-identical text only (FL-75)."""
    return str(uuid.uuid5(uuid.uuid5(_DIARY_NS, agent_id), content))


def memory_record(
    *,
    subject: str,
    row: dict[str, Any] | None,
    writer: str,
    at: int,
    immutable: bool,
) -> Record:
    """Build the record that publishes ``row`` on ``subject`` (None: a tombstone).

    An immutable create's op id derives from the subject, so a repeat inside the broker's window is
    the same message; an update or tombstone mints a fresh one.

    Raises:
        InvalidField: the subject is not a memory row subject.
        TooLarge: the encoded record exceeds :data:`MAX_MEMORY_RECORD` (named ``memory_record``).
    """
    parsed = parse_subject(subject)
    if parsed is None:
        raise InvalidField("subject", f"{subject!r} is not a memory subject")
    handle, table, key = parsed
    name = f"memory-{table}"
    op_id = derive_op_id(name, subject) if immutable and row is not None else mint_op_id(name)
    payload: dict[str, Any] = {"handle": handle, "table": table, "key": key}
    if row is not None:
        payload["row"] = row
    rec = Record(
        kind="memory_put" if row is not None else "memory_tombstone",
        domain="memory",
        subject=subject,
        op_id=op_id,
        writer=writer,
        generation=GENERATION,
        at=at,
        payload=payload,
    )
    size = len(rec.encode())
    if size > MAX_MEMORY_RECORD:
        raise TooLarge("memory_record", MAX_MEMORY_RECORD, size)
    return rec
