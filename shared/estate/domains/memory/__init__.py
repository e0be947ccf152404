"""The memory domain: a seat's diary, episodes, counterparty profiles and learned skills (AG-1).

Owns the table ``memory_rows``, the record kinds ``memory_put`` and ``memory_tombstone``, the reads
``memory.rows`` and ``memory.count``, and the wire shapes every writer builds (``_wire``). Its log
``memory`` is compacted (stream ``CREWLET_MEMORY``, one message per subject, subjects
``crewlet.memory.<handle>.<table>.<key>``). Writers publish straight to the log with the broker
arbitrating (first writer wins for immutable rows, compare-and-set for mutable ones: AG-1), so the
domain has no decided writes; :mod:`shared.memory` is the writer. It may import
:mod:`shared.estate.log`, :mod:`shared.estate.store` and the estate's base modules.
"""

from __future__ import annotations

from .._seam import EstateDomain, ReadOp
from ._apply import apply_memory_put, apply_memory_tombstone
from ._read import MAX_ROWS, memory_count, memory_rows
from ._tables import MemoryRow
from ._wire import (
    IMMUTABLE,
    MAX_MEMORY_RECORD,
    MEMORY_SUBJECTS,
    MUTABLE,
    TABLES,
    diary_id,
    memory_key,
    memory_record,
    memory_subject,
    parse_subject,
)

__all__ = [
    "DOMAIN",
    "IMMUTABLE",
    "MAX_MEMORY_RECORD",
    "MAX_ROWS",
    "MUTABLE",
    "TABLES",
    "diary_id",
    "memory_key",
    "memory_record",
    "memory_subject",
    "parse_subject",
]

DOMAIN = EstateDomain(
    name="memory",
    log="memory",
    stream="CREWLET_MEMORY",
    compacted=True,
    subjects=(MEMORY_SUBJECTS,),
    tables=(MemoryRow,),
    reads={
        "memory.rows": ReadOp(memory_rows, inline=True),
        "memory.count": ReadOp(memory_count, inline=True),
    },
    apply={"memory_put": apply_memory_put, "memory_tombstone": apply_memory_tombstone},
)
