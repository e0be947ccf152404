"""Deriving a node's usage days from its own turn records (ES-69, AG-47): pure functions, no I/O.

A turn belongs to the company day its ``started_at`` falls in, cut on the company ``timezone``
(:func:`day_bounds`); a turn still running is left for a later tick. What one seat-day carries
(AG-47), and where each figure comes from today:

- spend by phase, worker, provider and model: the turn record's rounds (``phase`` ``execute`` or
  ``review``; ``auxiliary``, ``sandbox``, ``subagent`` and ``judge`` spend is not recorded by any
  turn yet, so those phases and ``worker`` stay empty until the reflect, learning and sandbox
  work records it);
- turns by outcome and a duration histogram (1, 5, 15, 60, 300, 900 s, over);
- page reads: each successful ``get_page`` call is a read of ``(page, via="get_page")``; at most
  :data:`PAGE_READS` distinct entries are kept, in first-read order, and every read of an entry
  past them is counted in ``reads_dropped``;
- sandbox runs and approvals: 0 (neither exists yet, AG-23 / AG-38).

A turn started by a schedule fire (trigger payload ``source: schedule``) also counts on that
schedule's day object for the seat it ran as, with ``fires`` the distinct fires it worked.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

__all__ = [
    "DURATION_BUCKETS",
    "PAGE_READS",
    "PHASES",
    "DayObject",
    "TurnUsage",
    "company_day",
    "day_bounds",
    "fold_day",
    "object_id",
    "turn_usage",
]

PAGE_READS = 256
"""Most ``(page, via)`` entries one seat-day keeps (AG-47); the rest are counted in ``reads_dropped``."""
DURATION_BUCKETS: tuple[int, ...] = (1, 5, 15, 60, 300, 900)
"""Upper bounds in seconds of the duration histogram's buckets (AG-47); longer turns count ``over``."""
PHASES: tuple[str, ...] = ("execute", "review", "auxiliary", "sandbox", "subagent", "judge")
"""The spend phases a usage day names (AG-47)."""
_TOKEN = re.compile(r"[^A-Za-z0-9_-]")


def day_bounds(day: str, tz: ZoneInfo) -> tuple[float, float]:
    """Return ``[start, end)`` of company day ``day`` (``YYYY-MM-DD``) in unix seconds, cut on ``tz``.

    Raises:
        ValueError: ``day`` is not an ISO date.
    """
    d = date.fromisoformat(day)
    start = datetime.combine(d, time(0), tzinfo=tz)
    end = datetime.combine(d + timedelta(days=1), time(0), tzinfo=tz)
    return start.timestamp(), end.timestamp()


def company_day(ts: float, tz: ZoneInfo) -> str:
    """Return the company day (``YYYY-MM-DD`` on ``tz``) of the instant ``ts`` (unix seconds)."""
    return datetime.fromtimestamp(ts, tz).date().isoformat()


def _token(text: str) -> str:
    """``text`` as one subject token: itself when plain, else a readable prefix and a digest."""
    if text and not _TOKEN.search(text) and len(text) <= 64:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"{_TOKEN.sub('_', text)[:40]}-{digest}"


def object_id(node: str, day: str, kind: str, seat: str, schedule: str = "") -> str:
    """Return ``<node>.<day>.<object>``: the day object's id and its subject's tail (ES-69).

    ``<object>`` is ``seat-<handle>`` or ``schedule-<digest of scope/name and seat>``; every token is
    subject-safe (characters outside ``[A-Za-z0-9_-]`` leave a digest).
    """
    obj = f"seat-{_token(seat)}" if kind == "seat" else f"schedule-{_token(schedule + '@' + seat)}"
    return f"{_token(node)}.{day}.{obj}"


@dataclass
class TurnUsage:
    """What one finished turn adds to its day (AG-47).

    Attributes:
        seat: The seat's handle.
        outcome: The turn's outcome (``delivered``, ``failed``, ``abandoned``...).
        duration: Wall time in seconds.
        spend: ``(phase, worker, provider, model)`` → ``[input, output, cache_read, cache_write, rounds]``.
        reads: ``(page, via)`` per page read, in order.
        schedule: ``<scope>/<name>`` when a schedule fire started it, else "".
        fire: The fire's label (``YYYYmmddTHHMM``) when ``schedule`` is set.
    """

    seat: str
    outcome: str
    duration: float
    spend: dict[tuple[str, str, str, str], list[int]] = field(default_factory=dict)
    reads: list[tuple[str, str]] = field(default_factory=list)
    schedule: str = ""
    fire: str = ""


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _num(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _spend(record: Mapping[str, Any], row: Mapping[str, Any]) -> dict[tuple[str, str, str, str], list[int]]:
    spend: dict[tuple[str, str, str, str], list[int]] = {}
    rounds = [r for r in record.get("rounds") or () if isinstance(r, dict)]
    for r in rounds:
        key = (
            str(r.get("phase") or "execute"),
            "",
            str(r.get("provider_key") or ""),
            str(r.get("model") or ""),
        )
        line = spend.setdefault(key, [0, 0, 0, 0, 0])
        for i, name in enumerate(
            ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
        ):
            line[i] += _num(r.get(name))
        line[4] += 1
    if not rounds and (_num(row.get("input_tokens")) or _num(row.get("output_tokens"))):
        key = ("execute", "", str(row.get("provider_key") or ""), str(row.get("model") or ""))
        spend[key] = [_num(row.get("input_tokens")), _num(row.get("output_tokens")), 0, 0, 0]
    return spend


def _reads(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for call in record.get("tool_calls") or ():
        if not isinstance(call, dict) or call.get("name") != "get_page" or call.get("is_error"):
            continue
        result, args = _obj(call.get("result")), _obj(call.get("arguments"))
        page = str(result.get("id") or f"{args.get('space', '')}/{args.get('title', '')}")
        out.append((page, "get_page"))
    return out


def turn_usage(row: Mapping[str, Any]) -> TurnUsage:
    """Return what one finished turn row adds to its day (AG-47).

    Args:
        row: A turn row of the node's turn records: ``seat``, ``outcome``, ``started_at``,
            ``ended_at`` (unix seconds), ``input_tokens``, ``output_tokens``, ``provider_key``,
            ``model`` and ``record`` (the turn's whole record as a dict, or {}).

    Returns:
        The turn's usage; a record missing its rounds falls back to the row's token totals.
    """
    record = _obj(row.get("record"))
    started, ended = row.get("started_at"), row.get("ended_at")
    duration = record.get("duration_seconds")
    if not isinstance(duration, int | float) or duration <= 0:
        duration = float(ended) - float(started) if isinstance(ended, int | float) and started else 0.0
    use = TurnUsage(str(row.get("seat") or ""), str(row.get("outcome") or ""), float(duration))
    use.spend = _spend(record, row)
    use.reads = _reads(record)
    trigger = _obj(record.get("trigger"))
    payload = _obj(trigger.get("payload"))
    if trigger.get("source") == "schedule" or payload.get("source") == "schedule":
        use.schedule = f"{payload.get('scope', '')}/{payload.get('schedule', '')}"
        use.fire = str(payload.get("fire_label") or trigger.get("event_id") or "")
    return use


def _bucket(seconds: float) -> str:
    for bound in DURATION_BUCKETS:
        if seconds <= bound:
            return str(bound)
    return "over"


@dataclass
class DayObject:
    """One day object (ES-69): a node's whole cumulative value for one day and seat or schedule.

    Attributes:
        node, day, kind, seat, schedule: Which object (``kind`` ``seat`` or ``schedule``).
        turns: Turns counted.
        outcomes: Outcome → turns.
        durations: Histogram bucket → turns (``"1"`` ... ``"900"``, ``"over"``).
        spend: ``(phase, worker, provider, model)`` → ``[input, output, cache_read, cache_write, rounds]``.
        page_reads: ``(page, via)`` → reads, at most :data:`PAGE_READS` entries in first-read order.
        reads_dropped: Reads past those entries.
        fires: Distinct schedule fires worked (schedule objects).
    """

    node: str
    day: str
    kind: str
    seat: str
    schedule: str = ""
    turns: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    durations: dict[str, int] = field(
        default_factory=lambda: {str(b): 0 for b in (*DURATION_BUCKETS, "over")}
    )
    spend: dict[tuple[str, str, str, str], list[int]] = field(default_factory=dict)
    page_reads: dict[tuple[str, str], int] = field(default_factory=dict)
    reads_dropped: int = 0
    fires: set[str] = field(default_factory=set)

    @property
    def id(self) -> str:
        """``<node>.<day>.<object>`` (:func:`object_id`)."""
        return object_id(self.node, self.day, self.kind, self.seat, self.schedule)

    def add(self, use: TurnUsage) -> None:
        """Count one turn's usage into this object."""
        self.turns += 1
        self.outcomes[use.outcome] = self.outcomes.get(use.outcome, 0) + 1
        self.durations[_bucket(use.duration)] += 1
        for key, line in use.spend.items():
            mine = self.spend.setdefault(key, [0, 0, 0, 0, 0])
            for i, v in enumerate(line):
                mine[i] += v
        for entry in use.reads:
            if entry in self.page_reads:
                self.page_reads[entry] += 1
            elif len(self.page_reads) < PAGE_READS:
                self.page_reads[entry] = 1
            else:
                self.reads_dropped += 1
        if use.fire:
            self.fires.add(use.fire)

    def payload(self) -> dict[str, Any]:
        """The record payload: the object's whole value (ES-69), JSON-able."""
        return {
            "node": self.node,
            "day": self.day,
            "kind": self.kind,
            "seat": self.seat,
            "schedule": self.schedule,
            "turns": self.turns,
            "outcomes": dict(sorted(self.outcomes.items())),
            "durations": self.durations,
            "spend": [
                {
                    "phase": k[0],
                    "worker": k[1],
                    "provider": k[2],
                    "model": k[3],
                    "input_tokens": v[0],
                    "output_tokens": v[1],
                    "cache_read_tokens": v[2],
                    "cache_write_tokens": v[3],
                    "rounds": v[4],
                }
                for k, v in sorted(self.spend.items())
            ],
            "page_reads": [{"page": p, "via": via, "reads": n} for (p, via), n in self.page_reads.items()],
            "reads_dropped": self.reads_dropped,
            "fires": len(self.fires),
            "sandbox_runs": 0,
            "approvals": 0,
        }


def fold_day(node: str, day: str, usages: Iterable[TurnUsage]) -> list[DayObject]:
    """Fold one day's turn usages (in start order) into its day objects.

    Returns:
        One ``seat`` object per seat that ran a turn, and one ``schedule`` object per (schedule,
        seat) whose fires started turns, ordered by id.
    """
    objects: dict[tuple[str, str, str], DayObject] = {}
    for use in usages:
        seat_obj = objects.setdefault(("seat", use.seat, ""), DayObject(node, day, "seat", use.seat))
        seat_obj.add(use)
        if use.schedule:
            key = ("schedule", use.seat, use.schedule)
            objects.setdefault(key, DayObject(node, day, "schedule", use.seat, use.schedule)).add(use)
    return sorted(objects.values(), key=lambda o: o.id)
