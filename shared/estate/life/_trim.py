"""The trim point of one log and the readings of its six terms (ES-47, ES-48, ES-49).

The trim may delete every record at or below the *trim point*: the minimum of six terms, each
read separately and each only able to lower the point:

================  =====================================================================================
``applied``       lowest committed position (``seq``) over the counted set: every node with a
                  ``positions`` row on the log, plus every live data node (presence, role ``data``)
                  at 0 until its first report. A stale row still counts (it pins the log) until the
                  node is evicted; rows of the ``excluded`` nodes (evicted past their grace) do not.
``min_hold``      lowest live hold (``trim_holds`` ``<domain>.<kind>-<node>``: backups, joining
                  nodes); ``unbounded`` when there is none.
``backup_floor``  what has left the host (ES-49). ``engine``: the newest *verified* announcement in
                  ``backups`` younger than ``retention.backup_max_age`` gives its
                  ``positions[domain].seq``; none, or only older ones, is 0 (it blocks). ``operator``:
                  the position of ``crewlet retention ack`` (``trim_floors`` key ``ack.<domain>``),
                  0 until the operator acked once.
``snapshot_floor`` 2nd-highest snapshot position (``positions`` ``snapshot.seq``) over the counted
                  set, a node without an artefact counting 0; ``n/a`` when the counted set is one
                  node (a sole node's recovery artefact is its backup, ES-55).
``feed_ack_floor`` ``n/a``: in this project no wake feed consumes the state logs (wakes ride the
                  bus), so no feed acknowledgement can pin them.
``age_floor``     the newest sequence stored before ``now - min_age`` (a binary search over the
                  log's message timestamps, :func:`read_age_floor`); ``first_seq - 1`` when nothing
                  is that old.
================  =====================================================================================

A term is an int, ``n/a`` (the domain lacks it), ``unbounded`` (it binds nothing) or
``unreadable`` (it could not be read: it blocks). :func:`conclude` is pure; the ``read_*``
functions are what the ``worker:retention`` duty (``services/workers/retention.py``) calls.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext

from shared.coordination import Coordination, CoordinationUnavailable

from .._errors import InvalidField
from ..log._ids import GENERATION, STREAMS, stream_subjects

__all__ = [
    "TERMS",
    "TermValue",
    "TrimConclusion",
    "conclude",
    "decode_record",
    "counted_positions",
    "read_age_floor",
    "read_backup_floor",
    "read_min_hold",
    "snapshot_floor",
]

TERMS: tuple[str, ...] = (
    "applied",
    "min_hold",
    "backup_floor",
    "snapshot_floor",
    "feed_ack_floor",
    "age_floor",
)
"""The six terms of ES-47, in display order."""

TermValue = int | Literal["n/a", "unbounded", "unreadable"]
"""One term's value: a sequence, or why it has none."""

_WORDS = ("n/a", "unbounded", "unreadable")


@dataclass(frozen=True)
class TrimConclusion:
    """What the terms allow (ES-47).

    Attributes:
        point: The highest sequence that may be deleted (records ``<= point``); 0 while blocked.
        blocked_by: The terms that stop the trim: every ``unreadable`` term, and ``backup_floor``
            at 0 (no backup counted, or the operator never acked: ES-49). Empty when the trim may
            run — a point of 0 from a young log (``age_floor`` 0) or a node at 0 (``applied``) is
            a trim with nothing to delete yet, not a blocked one.
        binding: The int terms equal to the point (what holds it where it is).
        terms: Term → its value as read (display and the ``trim_floors`` record).
    """

    point: int
    blocked_by: list[str]
    binding: list[str]
    terms: dict[str, TermValue] = field(default_factory=dict)

    @property
    def blocked(self) -> bool:
        """True when nothing may be deleted on this conclusion."""
        return bool(self.blocked_by)


def conclude(terms: Mapping[str, TermValue]) -> TrimConclusion:
    """Return the trim point of one log from its six term values (ES-47).

    Args:
        terms: Every name of :data:`TERMS` → an int ``>= 0`` or ``n/a`` | ``unbounded`` | ``unreadable``.

    Returns:
        The conclusion. Any ``unreadable`` term blocks, and so does ``backup_floor`` at 0 (nothing
        has left the host, ES-49): the point is then 0. Otherwise the point is the minimum of the
        int terms. When no term is an int (nothing bounds the trim, which a log with an age term
        cannot be) the point is 0 and nothing is named: nothing is deleted on no evidence.

    Raises:
        InvalidField: a term is missing or not a valid value (names the term).
    """
    values: dict[str, TermValue] = {}
    for name in TERMS:
        if name not in terms:
            raise InvalidField(f"terms.{name}", "missing: every one of the six terms must be given")
        v = terms[name]
        if isinstance(v, bool) or not (isinstance(v, int) and v >= 0 or v in _WORDS):
            raise InvalidField(
                f"terms.{name}", f"{v!r} is neither a sequence >= 0 nor one of {', '.join(_WORDS)}"
            )
        values[name] = v
    blocked = [n for n, v in values.items() if v == "unreadable" or (n == "backup_floor" and v == 0)]
    ints = {n: v for n, v in values.items() if isinstance(v, int)}
    if not ints:
        return TrimConclusion(0, blocked, [], values)
    point = min(ints.values())
    binding = [n for n, v in ints.items() if v == point]
    return TrimConclusion(0 if blocked else point, blocked, binding, values)


# -- readings -------------------------------------------------------------------------------------


def decode_record(raw: bytes) -> dict[str, Any] | None:
    """Return a coordination value as a JSON object, or None when it is not one."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


async def counted_positions(
    coord: Coordination,
    domain: str,
    *,
    live_data_nodes: Iterable[str] = (),
    excluded: Iterable[str] = (),
) -> dict[str, dict[str, Any]]:
    """Return the counted set of ``domain``'s log: node → its ``positions`` row (ES-47).

    Args:
        coord: The coordination store (slot ``positions``, keys ``<domain>.<node>``).
        domain: ``tracker`` or ``pages``.
        live_data_nodes: Nodes presence names with role ``data``; one without a row counts as
            ``{"seq": 0, "snapshot": None}`` (before its first report).
        excluded: Nodes that no longer count (evicted past the grace, ES-47/ES-51).

    Returns:
        Node → row (``seq`` an int; ``snapshot`` as reported or None). A row of another log
        generation than this build's counts at 0 (its positions name another log).

    Raises:
        CoordinationUnavailable: the positions could not be read.
    """
    out: dict[str, dict[str, Any]] = {}
    gone = set(excluded)
    for e in await coord.entries("positions", f"{domain}."):
        row = decode_record(e.value)
        node = e.key[len(domain) + 1 :]
        if row is None or node in gone:
            continue
        same_log = (
            row.get("stream", STREAMS[domain]) == STREAMS[domain]
            and int(row.get("generation") or GENERATION) == GENERATION
        )
        seq = row.get("seq")
        out[node] = {
            **row,
            "seq": int(seq) if same_log and isinstance(seq, int) and seq >= 0 else 0,
            "snapshot": row.get("snapshot") if same_log else None,
        }
    for node in live_data_nodes:
        if node not in out and node not in gone:
            out[node] = {"node": node, "seq": 0, "snapshot": None}
    return out


def snapshot_floor(counted: Mapping[str, Mapping[str, Any]]) -> TermValue:
    """The ``snapshot_floor`` term: the 2nd-highest snapshot position over the counted set (ES-47).

    A node without an artefact counts 0. A counted set of one node answers ``n/a`` (ES-55: a sole
    node's recovery artefact is its backup); an empty set answers 0 (nothing is known).
    """
    if len(counted) == 1:
        return "n/a"
    seqs = []
    for row in counted.values():
        snap = row.get("snapshot")
        seq = snap.get("seq") if isinstance(snap, Mapping) else 0
        seqs.append(int(seq) if isinstance(seq, int) and seq >= 0 else 0)
    seqs.sort(reverse=True)
    return seqs[1] if len(seqs) >= 2 else 0


async def read_min_hold(coord: Coordination, domain: str) -> TermValue:
    """The ``min_hold`` term: the lowest live hold's ``seq`` in ``trim_holds`` (ES-47).

    Returns ``unbounded`` with no hold (the bucket's age lapses a hold its holder stopped
    re-putting) and ``unreadable`` when the holds cannot be read or a hold is malformed (a hold
    that cannot be read must still hold).
    """
    try:
        entries = await coord.entries("trim_holds", f"{domain}.")
    except CoordinationUnavailable:
        return "unreadable"
    seqs: list[int] = []
    for e in entries:
        row = decode_record(e.value)
        seq = row.get("seq") if row is not None else None
        if not isinstance(seq, int) or seq < 0:
            return "unreadable"
        seqs.append(seq)
    return min(seqs) if seqs else "unbounded"


async def read_backup_floor(
    coord: Coordination, domain: str, *, mode: str, max_age: float, now_us: int | None = None
) -> TermValue:
    """The ``backup_floor`` term (ES-49).

    Args:
        coord: The coordination store (slots ``backups`` and ``trim_floors``).
        domain: ``tracker`` or ``pages``.
        mode: ``engine`` (verified backups this fleet announced) or ``operator`` (the ack).
        max_age: ``retention.backup_max_age`` in seconds.
        now_us: Now, unix microseconds (tests pass another instant).

    Returns:
        ``engine``: the newest verified announcement younger than ``max_age`` → its
        ``positions[domain].seq`` (of this log's stream and generation); none → 0 (it blocks).
        ``operator``: ``trim_floors`` ``ack.<domain>`` → its ``seq`` (0 until acked). ``unreadable``
        when the store cannot be read.

    Raises:
        InvalidField: ``mode`` is neither ``engine`` nor ``operator``.
    """
    if mode not in ("engine", "operator"):
        raise InvalidField("retention.backup_floor", f"{mode!r} is neither engine nor operator")
    try:
        if mode == "operator":
            entry = await coord.get("trim_floors", f"ack.{domain}")
            if entry is None:
                return 0
            row = decode_record(entry.value)
            seq = (row or {}).get("seq", (row or {}).get("position"))
            return int(seq) if isinstance(seq, int) and seq >= 0 else "unreadable"
        entries = await coord.entries("backups")
    except CoordinationUnavailable:
        return "unreadable"
    now = int(time.time() * 1_000_000) if now_us is None else now_us
    oldest = now - int(max_age * 1_000_000)
    best: tuple[int, int] | None = None  # (taken_at, seq)
    for e in entries:
        row = decode_record(e.value)
        if row is None or row.get("verified") is not True:
            continue
        taken = row.get("taken_at")
        pos = (row.get("positions") or {}).get(domain) if isinstance(row.get("positions"), dict) else None
        if not isinstance(taken, int) or taken < oldest or not isinstance(pos, dict):
            continue
        if (
            pos.get("stream", STREAMS[domain]) != STREAMS[domain]
            or int(pos.get("generation") or 1) != GENERATION
        ):
            continue
        seq = pos.get("seq")
        if isinstance(seq, int) and seq >= 0 and (best is None or taken > best[0]):
            best = (taken, seq)
    return best[1] if best is not None else 0


async def read_age_floor(
    js: JetStreamContext, domain: str, *, min_age: float, now_us: int | None = None
) -> tuple[TermValue, int, int]:
    """The ``age_floor`` term: the newest sequence stored before ``now - min_age`` (ES-47).

    A binary search over ``[first_seq, last_seq]`` reading message timestamps (``get_msg`` with
    ``next``, so a deleted sequence reads as the next one stored): ``O(log n)`` broker calls.

    Args:
        js: The JetStream context.
        domain: ``tracker`` or ``pages``.
        min_age: ``stream.tracker_retention.min_age`` in seconds.
        now_us: Now, unix microseconds (tests pass a later instant instead of waiting).

    Returns:
        ``(value, first_seq, last_seq)``: ``value`` is ``first_seq - 1`` when nothing stored is that
        old (nothing more may go), ``unreadable`` when the log cannot be read (then both
        sequences are 0).
    """
    stream = STREAMS[domain]
    now = int(time.time() * 1_000_000) if now_us is None else now_us
    cutoff = now - int(min_age * 1_000_000)
    try:
        info = await js.stream_info(stream)
        first, last = int(info.state.first_seq or 0), int(info.state.last_seq or 0)
        if info.state.messages == 0 or first == 0 or last < first:
            return max(last, first - 1, 0), first, last

        async def stored_at(seq: int) -> tuple[int, int]:
            msg = await js.get_msg(stream, seq=seq, subject=stream_subjects(domain), next=True)
            at = int(msg.time.timestamp() * 1_000_000) if msg.time is not None else now
            return int(msg.seq or seq), at

        lo, hi, best = first, last, first - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            seq, at = await stored_at(mid)
            if at < cutoff:
                best = max(best, seq)
                lo = seq + 1
            else:
                hi = mid - 1
        return best, first, last
    except (
        TimeoutError,
        nats.errors.Error,
        nats.js.errors.Error,
    ):
        return "unreadable", 0, 0
