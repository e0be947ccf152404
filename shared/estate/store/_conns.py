"""Plain connections for inline reads: sqlite3 rows shaped like SQLAlchemy's (issue 16).

:class:`PlainConn` runs literal SQL on a raw ``sqlite3`` connection on the event loop thread;
:class:`FastConn` gives a SQLAlchemy connection the same fast ``exec_driver_sql``. Both answer
:class:`PlainResult` rows with attribute access and ``_mapping``.
"""

from __future__ import annotations

import sqlite3
from collections import namedtuple
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection

__all__ = ["FastConn", "PlainConn", "PlainResult"]

_ROW_TYPES: dict[tuple[str, ...], type] = {}


def _row_type(names: tuple[str, ...]) -> type:
    """A tuple class with attribute access and ``_mapping`` (the parts of SQLAlchemy's ``Row`` used)."""
    cls = _ROW_TYPES.get(names)
    if cls is None:
        base = namedtuple("PlainRow", names, rename=True)  # type: ignore[misc]  # noqa: PYI024

        def mapping(self: Any) -> dict[str, Any]:
            return dict(zip(names, self, strict=True))

        cls = type("PlainRow", (base,), {"__slots__": (), "_mapping": property(mapping)})
        _ROW_TYPES[names] = cls
    return cls


class PlainResult:
    """The rows of one literal query on a :class:`PlainConn` (``first``/``all``/``scalar``/iteration)."""

    __slots__ = ("_cur",)

    def __init__(self, cur: sqlite3.Cursor) -> None:
        self._cur = cur

    def _make(self, raw: Sequence[Any]) -> Any:
        names = tuple(d[0] for d in self._cur.description)
        return _row_type(names)(*raw)

    def first(self) -> Any:
        """The first row, or None."""
        raw = self._cur.fetchone()
        self._cur.close()
        return None if raw is None else self._make(raw)

    def all(self) -> list[Any]:
        """Every row."""
        raws = self._cur.fetchall()
        if not raws:
            return []
        cls = _row_type(tuple(d[0] for d in self._cur.description))
        return [cls(*r) for r in raws]

    def scalar(self) -> Any:
        """The first column of the first row, or None."""
        raw = self._cur.fetchone()
        self._cur.close()
        return None if raw is None else raw[0]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.all())


class PlainConn:
    """A plain ``sqlite3`` connection with SQLAlchemy's ``exec_driver_sql`` shape (literal SQL only).

    SQLAlchemy's ``begin`` + ``exec_driver_sql`` cost ~30 µs + ~50 µs of Python per statement on
    the bench machine, ten times SQLite's own point query (issue 16, figure 6d): the inline read
    path runs its statements here instead. Statements are cached by ``sqlite3`` (prepared once).
    """

    __slots__ = ("raw",)

    def __init__(self, raw: sqlite3.Connection) -> None:
        self.raw = raw

    def exec_driver_sql(self, statement: str, parameters: Any = (), /) -> PlainResult:
        """Run one statement with ``?`` parameters."""
        return PlainResult(self.raw.execute(statement, parameters))


class FastConn:
    """A SQLAlchemy ``Connection`` whose ``exec_driver_sql`` goes straight to its ``sqlite3``
    connection: the same connection and transaction, without SQLAlchemy's ~50 µs of Python per
    statement (issue 16: 70 % of an apply's time on the writer thread). Everything else
    (``execute`` of constructs, ``connection``...) is the wrapped connection's. A list of
    parameter tuples runs ``executemany``, as SQLAlchemy's does. ``sqlite3`` errors come through
    unwrapped (:meth:`EstateStore.write` retries a busy lock either way).
    """

    __slots__ = ("_conn", "_raw")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._raw: sqlite3.Connection = conn.connection.driver_connection  # type: ignore[assignment]

    def exec_driver_sql(self, statement: str, parameters: Any = (), /) -> PlainResult:
        """Run one statement (a list of parameter tuples: once per tuple)."""
        if isinstance(parameters, list):
            return PlainResult(self._raw.executemany(statement, parameters))
        return PlainResult(self._raw.execute(statement, parameters))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)
