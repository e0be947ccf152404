"""Bringing an estate file written by an earlier build up to this build's tables (ES-1).

Columns added since are added with ``ALTER TABLE ... ADD COLUMN`` and their server default, and
missing indexes are created; both are idempotent, so every open may run them. Nothing is ever
dropped or rewritten.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Connection

from shared import logs

from .._errors import StoreFailed
from ._schema import EstateModel

__all__ = ["upgrade"]

_log = logs.get("statelog")


def _default_sql(conn: Connection, col: Column[Any]) -> str:
    default = col.server_default
    arg = getattr(default, "arg", None)
    if arg is None:
        if not col.nullable:
            raise StoreFailed(
                f"cannot add {col.table.name}.{col.name} to an older estate file: "
                "a NOT NULL column needs a server default"
            )
        return ""
    if isinstance(arg, str):
        return " DEFAULT '" + arg.replace("'", "''") + "'"
    return f" DEFAULT ({arg.compile(dialect=conn.dialect)})"


def upgrade(conn: Connection) -> list[str]:
    """Add this build's missing columns and indexes to an estate file written by an earlier one.

    Runs inside the open transaction, after ``create_all`` made any missing table; idempotent.
    A column comes with its server default (``tasks.labels`` ``'[]'``, ``statelog_ledger.resolved_to``
    ``''``), so every copy holds the same value in old rows and digests still agree (ES-1).

    Returns:
        The ``table.column`` names added (empty when the file was current).

    Raises:
        StoreFailed: a missing column cannot be added (NOT NULL without a server default, or a
            primary key): a defect of this build, never of the file.
    """
    added: list[str] = []
    for table in EstateModel.metadata.sorted_tables:
        have = {str(r[1]) for r in conn.exec_driver_sql(f"PRAGMA table_info({table.name})")}
        for col in table.columns:
            if col.name in have:
                continue
            if col.primary_key:
                raise StoreFailed(f"cannot add primary key column {table.name}.{col.name} to an older file")
            ddl = f"{col.type.compile(dialect=conn.dialect)}{'' if col.nullable else ' NOT NULL'}"
            conn.exec_driver_sql(
                f"ALTER TABLE {table.name} ADD COLUMN {col.name} {ddl}{_default_sql(conn, col)}"
            )
            added.append(f"{table.name}.{col.name}")
        for index in table.indexes:
            index.create(conn, checkfirst=True)
    if added:
        _log.info("estate_schema_upgraded", columns=added)
    return added
