"""The vectors domain: embedded windows of pages for semantic search (ES-66..ES-68, AG-11, AG-12).

Owns the tables ``vector_windows`` and ``vector_codes``, the record kinds ``vector_put`` and
``vector_withdraw``, the read ``vectors.pending`` (the embedding duty's work list and coverage), the
wire shapes of its records (``_wire``: windows, subjects) and the two-stage scan (``_scan``) the
hybrid search calls. Its log ``vectors`` is compacted (stream ``CREWLET_TRACKER_VECTORS``, one
message per window subject ``crewlet.statelog.vectors.<source_kind>.<source_id>.<window>``); the
embedding duty publishes straight to it (a window's newest record is its whole state), so the
domain has no decided writes. It may import :mod:`shared.estate.log`, :mod:`shared.estate.store`
and the estate's base modules.
"""

from __future__ import annotations

from .._seam import EstateDomain, ReadOp
from ._apply import apply_vector_put, apply_vector_withdraw
from ._read import coverage, pending
from ._scan import DEPTH, KEEP, merge_semantic, scan
from ._tables import VectorCode, VectorWindow
from ._wire import (
    MAX_WINDOWS,
    OVERLAP,
    WINDOW,
    decode_vector,
    encode_vector,
    parse_subject,
    sign_code,
    vector_record,
    vector_subject,
    windows_of,
)

__all__ = [
    "DEPTH",
    "DOMAIN",
    "KEEP",
    "MAX_WINDOWS",
    "OVERLAP",
    "WINDOW",
    "coverage",
    "decode_vector",
    "encode_vector",
    "merge_semantic",
    "parse_subject",
    "scan",
    "sign_code",
    "vector_record",
    "vector_subject",
    "windows_of",
]

DOMAIN = EstateDomain(
    name="vectors",
    log="vectors",
    compacted=True,
    tables=(VectorWindow, VectorCode),
    reads={"vectors.pending": ReadOp(pending)},
    apply={"vector_put": apply_vector_put, "vector_withdraw": apply_vector_withdraw},
)
