"""The store: the estate file's framework tables, its SQLite connections and statement helpers (ES-3).

Owns ``EstateModel`` (the metadata every estate table registers on) and the framework tables
(checkpoint, anchors, ledger, ledger watermark, gates), :class:`EstateStore` (one writer thread,
reader pool, inline reads, install/detach, WAL checkpoints), the schema upgrade of older files, the
literal-SQL helpers, the storage gauges and the FTS5 query builder. It may import the estate's base
modules (``_errors``, ``_alarms``) and nothing else of the estate: it knows no log and no domain
(a domain's tables reach it through the metadata and :func:`declare_ddl`).
"""

from ._conns import FastConn, PlainConn, PlainResult
from ._schema import (
    T_ANCHOR,
    T_CHECKPOINT,
    T_GATES,
    T_LEDGER,
    T_LEDGER_WATERMARK,
    Checkpoint,
    EstateModel,
    GateRow,
    declare_ddl,
    schema_ddl,
    table_of,
)
from ._storage import observe_storage
from ._store import EstateStore, raw_sql, upgrade

__all__ = [
    "T_ANCHOR",
    "T_CHECKPOINT",
    "T_GATES",
    "T_LEDGER",
    "T_LEDGER_WATERMARK",
    "Checkpoint",
    "EstateModel",
    "EstateStore",
    "FastConn",
    "GateRow",
    "PlainConn",
    "PlainResult",
    "declare_ddl",
    "observe_storage",
    "raw_sql",
    "schema_ddl",
    "table_of",
    "upgrade",
]
