"""Thin SQL helpers for the apply and read hot paths (ES-19: ≥ 2 000 rows/s drained).

Building a SQLAlchemy statement per row costs ~0.1–0.2 ms of Python on this hardware, several
times SQLite's own work; the applier's and the writer's per-record statements are therefore plain
SQL with ``?`` parameters, built once per shape and cached. Column names always come from the
table definitions in :mod:`~shared.estate._schema`, never from a record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy import Connection, Table

__all__ = ["SqlConn", "insert_row", "one", "rows", "run", "update_row"]


class SqlConn(Protocol):
    """A connection that runs literal SQL with ``?`` parameters: SQLAlchemy's ``Connection`` on the
    reader and writer threads, or a ``PlainConn`` (plain ``sqlite3``) on the inline read path
    (``EstateStore.read_inline``). Rows answer attribute access and ``_mapping`` either way."""

    def exec_driver_sql(self, statement: str, parameters: Any = ..., /) -> Any:
        """Run one statement; the result answers ``first()``, ``all()``, ``scalar()``."""


_CACHE: dict[tuple[str, tuple[str, ...], str], str] = {}


def _checked(table: Table, names: Iterable[str]) -> tuple[str, ...]:
    cols = tuple(names)
    unknown = [c for c in cols if c not in table.c]
    if unknown:
        raise ValueError(f"{table.name} has no column {unknown[0]!r}")
    return cols


def insert_row(conn: Connection, table: Table, row: Mapping[str, Any], *, conflict: str = "") -> None:
    """``INSERT [OR IGNORE|OR REPLACE] INTO table (...) VALUES (?...)`` for one row.

    Args:
        conn: The transaction's connection.
        table: The table.
        row: Column → value.
        conflict: ``""``, ``"OR IGNORE"`` or ``"OR REPLACE"``.

    Raises:
        ValueError: a key is not a column of ``table``.
    """
    key = (table.name, tuple(row), conflict)
    sql = _CACHE.get(key)
    if sql is None:
        cols = _checked(table, row)
        sql = f"INSERT {conflict} INTO {table.name} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        _CACHE[key] = sql
    conn.exec_driver_sql(sql, tuple(row.values()))


def update_row(
    conn: Connection, table: Table, values: Mapping[str, Any], *, where: Mapping[str, Any]
) -> None:
    """``UPDATE table SET a = ?, ... WHERE k = ? AND ...``.

    Raises:
        ValueError: a key is not a column of ``table``.
    """
    key = (table.name, (*values, "|", *where), "update")
    sql = _CACHE.get(key)
    if sql is None:
        sets = _checked(table, values)
        conds = _checked(table, where)
        sql = (
            f"UPDATE {table.name} SET {', '.join(f'{c} = ?' for c in sets)} "
            f"WHERE {' AND '.join(f'{c} = ?' for c in conds)}"
        )
        _CACHE[key] = sql
    conn.exec_driver_sql(sql, (*values.values(), *where.values()))


def run(conn: Connection, sql: str, params: Sequence[Any] | list[tuple[Any, ...]] = ()) -> None:
    """Execute literal SQL (one parameter tuple, or a list of tuples for executemany)."""
    conn.exec_driver_sql(sql, params)


def one(conn: SqlConn, sql: str, params: Sequence[Any] = ()) -> Any:
    """Return the first row of a literal query (attribute access, ``_mapping``), or None."""
    return conn.exec_driver_sql(sql, tuple(params)).first()


def rows(conn: SqlConn, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Return every row of a literal query."""
    return list(conn.exec_driver_sql(sql, tuple(params)).all())
