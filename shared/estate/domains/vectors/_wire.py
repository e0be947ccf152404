"""What a vectors record looks like (ES-67, ES-68, AG-11): subjects, windows and the two kinds.

A source (a page or a work item) is cut into windows (:func:`windows_of`): 4 KB of its body with
its title repeated at the top (ES-66), 512 B overlap, at most 64 per source (AG-11; the rest is
counted, never an error). Each window is one subject of the compacted log
``crewlet.statelog.vectors.<source_kind>.<source_id>.<window>`` (ES §0), carrying a
``vector_put`` (the whole window state) or a ``vector_withdraw`` (the window is gone: a removed
source, or a window beyond the source's new count).
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from ..._errors import InvalidField
from ...log._ids import GENERATION, mint_op_id
from ...log._record import Record

__all__ = [
    "KINDS",
    "MAX_WINDOWS",
    "OVERLAP",
    "WINDOW",
    "decode_vector",
    "encode_vector",
    "parse_subject",
    "sign_code",
    "vector_record",
    "vector_subject",
    "windows_of",
]

WINDOW = 4096
"""Characters of body per window (ES-66: 4 KB)."""
OVERLAP = 512
"""Characters two neighbouring windows share (AG-11)."""
MAX_WINDOWS = 64
"""Windows per source at most (AG-11 [ours]); beyond, the rest is counted (``crewlet.embedding.truncated``)."""
KINDS = ("page", "work_item")
"""The source kinds a window belongs to."""


def windows_of(title: str, body: str) -> tuple[list[str], int]:
    """Cut a source into its windows (ES-66, AG-11).

    Returns:
        ``(texts, truncated)``: at most :data:`MAX_WINDOWS` texts, each ``title`` + newline + up
        to :data:`WINDOW` characters of ``body`` (the first window also for an empty body), and
        how many further windows the body would have needed.
    """
    stride = WINDOW - OVERLAP
    need = 1 if len(body) <= WINDOW else 1 + -(-(len(body) - WINDOW) // stride)
    keep = min(need, MAX_WINDOWS)
    return [f"{title}\n{body[i * stride : i * stride + WINDOW]}" for i in range(keep)], need - keep


def vector_subject(source_kind: str, source_id: str, window: int) -> str:
    """Return ``crewlet.statelog.vectors.<source_kind>.<source_id>.<window>`` (ES §0).

    Raises:
        InvalidField: an unknown kind, an id holding ``.``/blanks/wildcards, or a window out of 0..63.
    """
    if source_kind not in KINDS:
        raise InvalidField("source_kind", f"{source_kind!r} is not one of {', '.join(KINDS)}")
    if not source_id or any(c in source_id for c in ". *>\t\n"):
        raise InvalidField("source_id", f"{source_id!r} cannot be a subject token")
    if not 0 <= window < MAX_WINDOWS:
        raise InvalidField("window", f"{window} is outside 0..{MAX_WINDOWS - 1}")
    return f"crewlet.statelog.vectors.{source_kind}.{source_id}.{window}"


def parse_subject(subject: str) -> tuple[str, str, int] | None:
    """Return ``(source_kind, source_id, window)`` of a window subject, None for any other subject."""
    parts = subject.split(".")
    if len(parts) != 6 or parts[:3] != ["crewlet", "statelog", "vectors"] or not parts[5].isdigit():
        return None
    return parts[3], parts[4], int(parts[5])


def encode_vector(vector: np.ndarray) -> str:
    """A vector as base64 of little-endian float32."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()


def decode_vector(raw: bytes, dims: int) -> np.ndarray:
    """Raw little-endian float32 bytes as a ``(dims,)`` array.

    Raises:
        ValueError: not ``dims`` floats.
    """
    v = np.frombuffer(raw, dtype="<f4")
    if v.shape != (dims,):
        raise ValueError(f"a vector of {v.size} floats, not {dims}")
    return v


def sign_code(vector: np.ndarray) -> bytes:
    """The 1-bit sign code of a vector (ES-66): bit ``i`` is ``vector[i] > 0``, packed big-endian."""
    return np.packbits(np.asarray(vector) > 0).tobytes()


def vector_record(
    *,
    source_kind: str,
    source_id: str,
    window: int,
    writer: str,
    at: int,
    vector: np.ndarray | None = None,
    windows: int = 1,
    model: str = "",
    edit_number: int = 0,
    shard: int = 0,
) -> Record:
    """Build the record of one window: ``vector_put`` with a vector, ``vector_withdraw`` without.

    Raises:
        InvalidField: a bad subject part (:func:`vector_subject`).
    """
    subject = vector_subject(source_kind, source_id, window)
    payload: dict[str, Any] = {"source_kind": source_kind, "source_id": source_id, "window": window}
    if vector is not None:
        payload.update(
            windows=windows,
            model=model,
            dims=int(np.asarray(vector).shape[0]),
            edit_number=edit_number,
            shard=shard,
            vector=encode_vector(vector),
        )
    return Record(
        kind="vector_put" if vector is not None else "vector_withdraw",
        domain="vectors",
        subject=subject,
        op_id=mint_op_id(f"vector-{source_kind}"),
        writer=writer,
        generation=GENERATION,
        at=at,
        payload=payload,
    )
