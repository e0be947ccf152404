"""The vectors domain's tables (ES-68, ES §12): one row per embedded source window.

``vector_windows`` keeps the exact vector (float32, little-endian) with what it was made from
(source, window, model, width, the source's ``edit_number`` / ``version``, search bucket);
``vector_codes`` is its narrow sibling with the 1-bit sign code the first stage of the scan reads
(ES-66). Both are keyed by the window's log subject, the compacted log's unit (one message each).
"""

from __future__ import annotations

from sqlalchemy import Index
from sqlmodel import Field

from ...store._schema import EstateModel, table_of

__all__ = ["T_VECTOR_CODES", "T_VECTOR_WINDOWS", "VectorCode", "VectorWindow"]


class VectorWindow(EstateModel, table=True):
    """``vector_windows`` (ES-68): one embedded window of a page or work item.

    Attributes:
        subject: ``crewlet.statelog.vectors.<source_kind>.<source_id>.<window>`` (primary key).
        source_kind: ``page`` or ``work_item``.
        source_id: The page id or work item id.
        window: 0-based window number.
        windows: How many windows the source had when this one was published.
        model: The embedding model id; only vectors of the query's model and width are compared.
        dims: The vector width.
        edit_number: The source's ``edit_number`` (pages) or ``version`` (work items) embedded.
        shard: The source's search bucket (ES-60).
        vector: ``dims`` float32, little-endian, L2-normalised.
        seq: The log sequence that carried it.
    """

    __tablename__ = "vector_windows"
    __table_args__ = (Index("ix_vector_windows_source", "source_kind", "source_id", "window"),)
    subject: str = Field(primary_key=True)
    source_kind: str
    source_id: str
    window: int
    windows: int = 1
    model: str
    dims: int
    edit_number: int
    shard: int
    vector: bytes
    seq: int = 0


class VectorCode(EstateModel, table=True):
    """``vector_codes`` (ES-66): the 1-bit sign code of one window (``dims / 8`` bytes)."""

    __tablename__ = "vector_codes"
    __table_args__ = (Index("ix_vector_codes_model", "model", "dims", "seq"),)
    subject: str = Field(primary_key=True)
    source_kind: str
    source_id: str
    model: str
    dims: int
    shard: int
    code: bytes
    seq: int = 0


T_VECTOR_WINDOWS = table_of(VectorWindow)
T_VECTOR_CODES = table_of(VectorCode)
