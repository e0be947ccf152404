"""Operation ids, positions, subjects and search buckets: the estate's names (ES-6, ES-22, ES-60, §0).

Operation ids (ES-6) are time-ordered: a UUIDv7 (its leading 48 bits the mint instant in unix
milliseconds) followed by a name saying what the operation is, e.g.
``01933b6e-8f8a-7c41-9a0e-5f1d7c8e2b11.update-ENG-4``. At most 128 bytes, no whitespace. A derived id
(:func:`derive_op_id`) takes its random bits from a digest of what the operation *is*, so the same
gesture re-run (or every node seeding the same project) mints the same id and the ledger collapses it.

Positions (ES-22) are ``{stream, generation, seq}`` inside answers and the token
``<stream>@<generation>:<seq>`` as a parameter. Generation is 1 until a reanchor (P2) opens another.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
import uuid
from dataclasses import dataclass
from typing import Literal

from .._errors import InvalidField, WrongStream

__all__ = [
    "BUCKETS",
    "GENERATION",
    "MAX_OP_ID",
    "STREAMS",
    "Domain",
    "Position",
    "barrier_subject",
    "derive_op_id",
    "domain_of_stream",
    "mint_op_id",
    "object_subject",
    "register_log",
    "op_id_instant",
    "search_bucket",
    "COMPACTED",
    "is_compacted",
    "stream_subjects",
    "stream_subject_filters",
    "validate_op_id",
]

Domain = Literal["tracker", "pages", "memory", "vectors", "usage"]
STREAMS: dict[str, str] = {
    "tracker": "CREWLET_TRACKER_LOG",
    "pages": "CREWLET_PAGES_LOG",
    "vectors": "CREWLET_TRACKER_VECTORS",
    "usage": "CREWLET_USAGE_LOG",
}
"""Log → JetStream stream name (spec/estate.md §0, binding); a domain owning a log §0 does not name
declares its stream and the domain registry adds it here (:func:`register_log`)."""


COMPACTED: set[str] = {"vectors", "usage"}
"""Logs whose stream keeps one message per subject (``max_msgs_per_subject = 1``): the newest record
of a subject is the object's whole state, older ones go (ES-68, ES-69, AG-1). Their appliers accept
gaps in the sequence and never find a copy below the log (a vanished sequence was superseded)."""

_EXTRA_SUBJECTS: dict[str, tuple[str, ...]] = {}


def register_log(log: str, stream: str, *, compacted: bool = False, subjects: tuple[str, ...] = ()) -> None:
    """Add a log's stream to :data:`STREAMS` (the domain registry, for a domain owning a new log).

    Args:
        log: The log's name (the domain's).
        stream: Its JetStream stream.
        compacted: One message per subject (:data:`COMPACTED`).
        subjects: Subject filters the stream carries besides ``crewlet.statelog.<log>.>`` (AG-1's
            ``crewlet.memory.>``); barrier and gate records stay on the statelog subjects.

    Raises:
        ValueError: ``log`` is already the log of another stream, or ``stream`` of another log.
    """
    owner = next((d for d, s in STREAMS.items() if s == stream), None)
    if STREAMS.get(log, stream) != stream or owner not in (None, log):
        raise ValueError(f"log {log!r} cannot be stream {stream!r}: §0 names {STREAMS.get(log)!r}")
    STREAMS[log] = stream
    if compacted:
        COMPACTED.add(log)
    if subjects:
        _EXTRA_SUBJECTS[log] = tuple(subjects)


def is_compacted(log: str) -> bool:
    """True when ``log``'s stream keeps one message per subject (:data:`COMPACTED`)."""
    return log in COMPACTED


GENERATION = 1
"""The log generation every position carries until a reanchor (ES-91, P2) opens another."""

MAX_OP_ID = 128
"""Longest operation id in bytes (ES-6): it rides the ``Nats-Msg-Id`` header."""

BUCKETS = 64
"""Search buckets, fixed for the deployment (ES-60)."""

_OP_RE = re.compile(
    r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\.[A-Za-z0-9_.:@-]{1,91}$"
)
_NAME_BAD = re.compile(r"[^A-Za-z0-9_.:@-]+")


def stream_subjects(domain: str) -> str:
    """Return the subject filter of ``domain``'s log: ``crewlet.statelog.<domain>.>``."""
    return f"crewlet.statelog.{domain}.>"


def stream_subject_filters(domain: str) -> list[str]:
    """Return every subject filter of ``domain``'s stream: the statelog one, then any it registered."""
    return [stream_subjects(domain), *_EXTRA_SUBJECTS.get(domain, ())]


def object_subject(domain: str, kind: str, object_id: str) -> str:
    """Return the subject of one object: ``crewlet.statelog.<domain>.obj.<kind>.<object_id>`` (§0).

    One subject per object, so the expected-last-subject-sequence header arbitrates writes (ES-10).
    ``object_id`` may contain ``.`` only when it is a key the caller controls; ids are UUIDs or keys.
    """
    return f"crewlet.statelog.{domain}.obj.{kind}.{object_id}"


def barrier_subject(domain: str) -> str:
    """Return ``crewlet.statelog.<domain>.barrier`` (ES-26)."""
    return f"crewlet.statelog.{domain}.barrier"


def domain_of_stream(stream: str) -> str | None:
    """Return the domain whose log is ``stream``, or None for a name that is no log."""
    for d, s in STREAMS.items():
        if s == stream:
            return d
    return None


def _uuid7(ms: int, rand: bytes) -> str:
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    r = int.from_bytes(rand[:10], "big")
    value |= ((r >> 68) & 0xFFF) << 64  # rand_a: 12 bits
    value |= 0b10 << 62  # RFC 9562 variant
    value |= r & ((1 << 62) - 1)  # rand_b: 62 bits
    return str(uuid.UUID(int=value))


def _clean_name(name: str) -> str:
    cleaned = _NAME_BAD.sub("-", name.strip()).strip("-") or "op"
    if len(cleaned) > 91:
        cleaned = cleaned[:78] + "-" + hashlib.sha256(cleaned.encode()).hexdigest()[:12]
    return cleaned


def mint_op_id(name: str, *, at_ms: int | None = None) -> str:
    """Mint a fresh operation id (ES-6).

    Args:
        name: What the operation is (``create-ENG``, ``update-ENG-4``); characters outside
            ``[A-Za-z0-9_.:@-]`` become ``-``; longer than 91 bytes is shortened with a digest.
        at_ms: The instant in unix milliseconds; now when None.

    Returns:
        ``<uuid7>.<name>``, at most 128 bytes.
    """
    ms = int(time.time() * 1000) if at_ms is None else at_ms
    return f"{_uuid7(ms, os.urandom(10))}.{_clean_name(name)}"


def derive_op_id(name: str, *parts: str, at_ms: int = 0) -> str:
    """Mint the operation id of a gesture that must collapse when repeated (ES-6, ES-13).

    The random bits are a digest of ``name`` and ``parts``, so every node and every boot derives
    the same id for the same gesture (e.g. seeding a project from the company).

    Args:
        name: What the operation is.
        *parts: Everything that makes the gesture itself (keys, argument digests).
        at_ms: The instant to carry, unix milliseconds (0 for timeless seeds).

    Returns:
        The id, as :func:`mint_op_id` shapes it.
    """
    digest = hashlib.sha256("\x1f".join((name, *parts)).encode()).digest()
    return f"{_uuid7(at_ms, digest)}.{_clean_name(name)}"


def validate_op_id(op_id: str, *, field: str = "op_id") -> str:
    """Return ``op_id`` when it has the shape this engine mints, else refuse it (ES-6).

    Raises:
        InvalidField: not an engine-minted id (code ``op_id_invalid`` in the detail), naming ``field``.
    """
    if not isinstance(op_id, str) or len(op_id.encode()) > MAX_OP_ID or not _OP_RE.match(op_id):
        raise InvalidField(field, f"op_id_invalid: {op_id!r} is not an operation id this engine minted")
    return op_id


def op_id_instant(op_id: str) -> int:
    """Return the mint instant of ``op_id`` in unix milliseconds.

    Raises:
        InvalidField: ``op_id`` is not an engine-minted id.
    """
    validate_op_id(op_id)
    return int(op_id[:8] + op_id[9:13], 16)


def search_bucket(doc_id: str) -> int:
    """Return the search bucket of a document, in ``[0, 63]`` (ES-60).

    A stable hash of the document's own identity only (never its project, space, stream or node),
    so a moved document keeps its bucket.
    """
    return int.from_bytes(hashlib.sha256(doc_id.encode()).digest()[:8], "big") % BUCKETS


_POS_RE = re.compile(r"^(?P<stream>[A-Z0-9_]+)@(?P<gen>\d+):(?P<seq>\d+)$")


@dataclass(frozen=True, order=True)
class Position:
    """A place in one log (ES-22).

    Attributes:
        stream: The stream name (``CREWLET_TRACKER_LOG``).
        generation: The log generation (1 until a reanchor).
        seq: The stream sequence; 0 means "before the first record".
    """

    stream: str
    generation: int
    seq: int

    def token(self) -> str:
        """Return the parameter form ``<stream>@<generation>:<seq>``."""
        return f"{self.stream}@{self.generation}:{self.seq}"

    def as_dict(self) -> dict[str, object]:
        """Return the answer form ``{stream, generation, seq}``."""
        return {"stream": self.stream, "generation": self.generation, "seq": self.seq}

    @classmethod
    def parse(cls, token: str, *, field: str = "min_position", domain: str | None = None) -> Position:
        """Parse a position token.

        Args:
            token: ``<stream>@<generation>:<seq>``.
            field: The parameter name to cite in a refusal.
            domain: When given, the token must name this domain's log.

        Raises:
            InvalidField: the token is malformed or names no log.
            WrongStream: the token names another domain's log (ES-22).
        """
        m = _POS_RE.match(token.strip()) if isinstance(token, str) else None
        if m is None:
            raise InvalidField(field, f"{token!r} is not a position token <stream>@<generation>:<seq>")
        stream = m.group("stream")
        owner = domain_of_stream(stream)
        if owner is None:
            raise InvalidField(field, f"{stream} is not a state log")
        if domain is not None and owner != domain:
            raise WrongStream(field, f"{stream} is the {owner} log; this call reads {STREAMS[domain]}")
        return cls(stream, int(m.group("gen")), int(m.group("seq")))
