"""The estate's domains and their registry: one sub-package per domain, one line each below.

Owns :data:`REGISTERED` and what the rest of the estate reads from it: the logs (:data:`LOGS`), the
operation table (:data:`OPS`), each log's apply dispatch (:func:`apply_for`), the writes and reads
of every operation, the derived-table DDL and the objects a backup fetches. Each domain sub-package
(``tracker``, ``pages``, ``files``) may import :mod:`shared.estate.log`, :mod:`shared.estate.store`
and the estate's base modules (``_errors``, ``_protocol``); a domain imports another only for the
rows its own rows name (``files`` reads ``tracker``'s projects). Nothing here imports
:mod:`shared.estate.life` or the composition above it.
"""

from __future__ import annotations

from sqlalchemy import Connection

from .._protocol import OpKind
from ..log._applier import ApplyFn, ApplyOutcome
from ..log._gates import apply_gate
from ..log._ids import register_log
from ..log._record import Record
from ..store._schema import declare_ddl
from . import files, memory, pages, tracker, usage, vectors
from ._seam import EstateDomain, ReadOp, WriteOp

__all__ = [
    "DOMAINS",
    "FTS_DDL",
    "LOGS",
    "OPS",
    "REGISTERED",
    "EstateDomain",
    "ReadOp",
    "WriteOp",
    "apply_for",
    "domain_named",
    "reads",
    "writes",
]

REGISTERED: tuple[EstateDomain, ...] = (
    tracker.DOMAIN,
    files.DOMAIN,
    pages.DOMAIN,
    memory.DOMAIN,
    usage.DOMAIN,
    vectors.DOMAIN,
)
"""Every domain of this build, in the order its tables, DDL and operations are declared."""

LOGS: tuple[str, ...] = tuple(dict.fromkeys(d.log for d in REGISTERED))
"""The ordered logs the registered domains ride (``tracker``, ``pages``): one applier, checkpoint,
snapshot position, backup position, gate record and ledger sweep each."""

DOMAINS = LOGS
"""The logs under their public name (``shared.estate.DOMAINS``: what ES-22's positions name)."""

for _d in REGISTERED:
    if _d.stream:
        register_log(_d.log, _d.stream, compacted=_d.compacted, subjects=_d.subjects)
    declare_ddl(*_d.ddl)

FTS_DDL: tuple[str, ...] = tuple(s for d in REGISTERED for s in d.ddl)
"""The derived tables of every registered domain (the lexical index: SQLite FTS5 with ``bm25()``)."""

_ADMIN: dict[str, tuple[str | None, OpKind]] = {
    "estate.status": (None, "read"),
    "estate.digest": (None, "read"),
}

OPS: dict[str, tuple[str | None, OpKind]] = {
    **{op: (d.log, "write") for d in REGISTERED for op in d.writes},
    **{op: (d.log, "read") for d in REGISTERED for op in d.reads},
    **_ADMIN,
}
"""Operation → (log, kind), which decides floors (ES-37: a request carries the floors of its own
domain's log only) and repeat rules (ES-35). Admin operations (``estate.*``) belong to no domain."""


def domain_named(name: str) -> EstateDomain:
    """Return the registered domain ``name``.

    Raises:
        KeyError: no domain of that name is registered.
    """
    for d in REGISTERED:
        if d.name == name:
            return d
    raise KeyError(name)


def writes() -> dict[str, WriteOp]:
    """Operation → its write, over every registered domain."""
    return {op: w for d in REGISTERED for op, w in d.writes.items()}


def reads() -> dict[str, ReadOp]:
    """Operation → its read, over every registered domain."""
    return {op: r for d in REGISTERED for op, r in d.reads.items()}


def apply_for(log: str) -> ApplyFn:
    """Return the apply function of ``log``'s applier: gate records (ES-51) are the log's own, every
    other kind goes to the registered domain that declares it.

    Raises:
        KeyError: no registered domain rides ``log``.
    """
    kinds: dict[str, ApplyFn] = {}
    for d in REGISTERED:
        if d.log == log:
            kinds.update(d.apply)
    if not kinds:
        raise KeyError(log)

    def apply(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
        if rec.kind == "gate":  # ES-51: evictions and readmissions are on every counted log
            return ApplyOutcome(*apply_gate(conn, rec, seq))
        fn = kinds.get(rec.kind)
        if fn is None:
            raise ValueError(f"unknown {log} record kind {rec.kind!r}")
        return fn(conn, rec, seq)

    return apply
