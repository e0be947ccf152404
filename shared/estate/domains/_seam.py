"""The domain seam: what one estate domain declares, in one object (spec/estate.md §0, §21).

A domain is one sub-package of :mod:`shared.estate.domains` whose ``__init__`` builds one
:class:`EstateDomain` named ``DOMAIN``; :data:`shared.estate.domains.REGISTERED` lists them. The
schema, the appliers, the service's operation tables, the snapshot, the backup, the catch-up, the
eviction gestures and the ledger sweep read the registry; none of them names a domain.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from ..log._applier import ApplyFn
from ..log._decide import DecideCtx, Decision, Rules, ViewFn
from ..log._ids import STREAMS
from ..store._schema import EstateModel

__all__ = ["DecideFn", "EstateDomain", "ReadFn", "ReadOp", "WriteOp"]

DecideFn = Callable[[Connection, DecideCtx, dict[str, Any]], Decision]
"""``(conn, ctx, args) -> decision``: what a write appends, decided on one snapshot of the rows (ES-9)."""

ReadFn = Callable[[Any, Rules, dict[str, Any]], Any]
"""``(conn, rules, args) -> data``: a read on one snapshot of the rows (``conn`` a SQLAlchemy
connection, or the store's plain connection for an inline read)."""


@dataclass(frozen=True)
class WriteOp:
    """One write operation of a domain (ES-9, ES-10).

    Attributes:
        decide: Decides the record to append (or the answer without writing).
        view: Reads the write's answer back from the rows once applied.
        created: For a create whose object id derives from its op id: does that object's row exist
            (ES-8: a repeat past the ledger horizon); None otherwise.
        inline: ``decide`` and ``view`` use literal SQL only, so their reads may run on the event
            loop thread (``EstateStore.read_inline``, issue 16).
    """

    decide: DecideFn
    view: ViewFn
    created: Callable[[Connection, str], bool] | None = None
    inline: bool = False


@dataclass(frozen=True)
class ReadOp:
    """One read operation of a domain (ES-25).

    Attributes:
        read: The read.
        inline: Runs on the event loop thread (a point read of a few indexed statements, issue 16).
        search: A lexical search: run inline while this copy's searches are cheap, else on a reader
            thread, and answered with the index's state (building, ok, empty; ES-62).
    """

    read: ReadFn
    inline: bool = False
    search: bool = False


def row_exists(table: str) -> Callable[[Connection, str], bool]:
    """Return a :attr:`WriteOp.created` check: does ``table`` hold a row with ``id = object_id``."""

    def exists(conn: Connection, object_id: str) -> bool:
        return conn.exec_driver_sql(f"SELECT 1 FROM {table} WHERE id = ?", (object_id,)).first() is not None

    return exists


@dataclass(frozen=True)
class EstateDomain:
    """One estate domain: its log, its tables, its operations and how its records are applied.

    Attributes:
        name: The domain's name (``tracker``, ``pages``, ``files``).
        log: The ordered log its records ride: its own name when it owns one (then it must be a key
            of :data:`~shared.estate.log._ids.STREAMS`, or declare :attr:`stream`), or another
            registered domain's (``files`` rides ``tracker``: wire behaviour of ES-74).
        tables: Its SQLModel tables (on :class:`~shared.estate.store._schema.EstateModel`); created
            and upgraded at every open, compared by the digest, carried by the snapshot and backup
            (they copy the whole file) and by catch-up (it installs a snapshot).
        ddl: Derived tables (the FTS5 index), ``CREATE ... IF NOT EXISTS`` run at every open: left
            out of the digest and of the snapshot manifest's schema, maintained by ``apply``.
        writes: Operation → its write (``work.create``...); ``OPS`` says ``(log, "write")``.
        reads: Operation → its read; ``OPS`` says ``(log, "read")``.
        apply: Record kind → its deterministic apply ``(conn, record, seq) -> ApplyOutcome`` (ES-16).
            Kind ``gate`` is the log's own (ES-51) and may not be declared.
        stream: The JetStream stream of a log this domain owns that §0's table lacks (a new log);
            empty otherwise.
        corpus: The lexical corpus its log's index builds (``lexical_index_built source=``); empty
            for none.
        backup_objects: A query the backup runs on the copied file naming object-store objects its
            rows reference, yielding ``(object_key, sha256, size, path, version, owner)`` rows;
            empty when its rows name none.
        compacted: Its own log keeps one message per subject (AG-1, ES-69): writers publish whole
            object states, the applier tolerates gaps, catch-up never finds the copy below it.
        subjects: Subject filters its own stream carries besides ``crewlet.statelog.<log>.>``.
    """

    name: str
    log: str
    tables: tuple[type[EstateModel], ...]
    writes: Mapping[str, WriteOp] = field(default_factory=dict)
    reads: Mapping[str, ReadOp] = field(default_factory=dict)
    apply: Mapping[str, ApplyFn] = field(default_factory=dict)
    ddl: tuple[str, ...] = ()
    stream: str = ""
    corpus: str = ""
    backup_objects: str = ""
    compacted: bool = False
    subjects: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if "gate" in self.apply:
            raise ValueError(f"domain {self.name}: record kind 'gate' belongs to the log (ES-51)")
        if self.stream and STREAMS.get(self.log, self.stream) != self.stream:
            raise ValueError(f"domain {self.name}: log {self.log} is {STREAMS[self.log]}, not {self.stream}")
