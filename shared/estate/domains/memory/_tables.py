"""The memory domain's table (AG-1): ``memory_rows``, one row per live memory subject.

A compacted log's newest record per subject is the object's whole state, so the copy keeps exactly
that: the row as its writer published it (JSON), the subject, its sequence and who wrote it. The six
logical tables of AG-1 (``agent_diary``, ``episodes``, ...) are the ``tbl`` column; reads filter
on ``(handle, tbl)``. A tombstone deletes the row.
"""

from __future__ import annotations

from sqlalchemy import Index
from sqlmodel import Field

from ...store._schema import EstateModel, table_of

__all__ = ["MemoryRow", "T_MEMORY"]


class MemoryRow(EstateModel, table=True):
    """``memory_rows`` (AG-1): the live state of one memory subject.

    Attributes:
        subject: ``crewlet.memory.<handle>.<table>.<key>`` (the primary key).
        handle: The seat whose memory it is.
        tbl: Which of AG-1's tables (``agent_diary``, ``episodes``...).
        key: 32 hex of SHA-256 of the natural key.
        row: The row as published, a JSON object.
        seq: The log sequence that carried it (what a reader's floor compares with).
        writer: The node that published it.
        at: The writer's instant, unix microseconds.
    """

    __tablename__ = "memory_rows"
    __table_args__ = (Index("ix_memory_rows_handle_tbl", "handle", "tbl", "at"),)
    subject: str = Field(primary_key=True)
    handle: str
    tbl: str
    key: str
    row: str
    seq: int
    writer: str = ""
    at: int = 0


T_MEMORY = table_of(MemoryRow)
