"""A seat's memory: writing it (AG-1, AG-2), hydrating it where the seat runs (AG-7).

The rows live in the estate's ``memory`` domain (:mod:`shared.estate.domains.memory`) on every data
node; this package is what every node (satellites too) uses to write them and to make them readable
where a seat is held. Recall, the tools and the reflect dispatcher build on it.
"""

from shared.estate.domains.memory import (
    IMMUTABLE,
    MAX_MEMORY_RECORD,
    MUTABLE,
    TABLES,
    diary_id,
    memory_subject,
    parse_subject,
)

from ._access import MEMORY_STREAM, RoutedMemory
from ._cache import HYDRATE_WITHIN, HydrationFailed, ScratchCache, hydrate_on_data_node, hydrate_scratch
from ._outbox import DROP_AFTER, Outbox
from ._writer import CAS_ROUNDS, FLUSH_EVERY, MemoryWrite, MemoryWriter

__all__ = [
    "CAS_ROUNDS",
    "DROP_AFTER",
    "FLUSH_EVERY",
    "HYDRATE_WITHIN",
    "IMMUTABLE",
    "MEMORY_STREAM",
    "MAX_MEMORY_RECORD",
    "MUTABLE",
    "TABLES",
    "HydrationFailed",
    "MemoryWrite",
    "MemoryWriter",
    "Outbox",
    "ScratchCache",
    "RoutedMemory",
    "diary_id",
    "hydrate_on_data_node",
    "hydrate_scratch",
    "memory_subject",
    "parse_subject",
]
