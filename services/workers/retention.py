"""The ``worker:retention`` duty: the trim of the tracker and pages logs (ES-47, ES-48, ES-49).

One node holds the duty (lease ``worker:retention``, TTL 45 min) and ticks every
``retention.trim_tick`` (15 min). Per domain (``tracker`` and ``pages``; never ``vectors`` or
``usage``, which the broker bounds itself) a tick:

1. reads the six terms (:mod:`shared.estate.life._trim`) and concludes the trim point;
2. publishes the floor FIRST to the ``trim_floors`` slot (key ``<domain>``, compare-and-set), the
   record of the plan's shape ``{domain, stream, generation, floor, first_seq, terms, blocked_by,
   trim_to, at, by}``. Within a generation the floor never moves down: a lower point keeps the old
   floor. ``trim_to`` is this tick's conclusion (0 while blocked);
3. only when that publish was acknowledged, purges the log below the point
   (``purge_stream(seq=point + 1)`` keeps every record ``>= point + 1``), logs ``statelog_trimmed``
   (``domain``, ``floor``, ``purged``) and refreshes the record's ``first_seq``.

A tick whose floor could not be published deletes nothing (ES-48). The ``trim_blocked`` alarm
(ES-92) is raised while any domain is blocked, naming the blocking terms per domain, and cleared
when none is.

Evicted nodes (ES-47, ES-51): a node evicted more than a minute ago stops counting. The gates
live in a data node's copy, so the duty asks :attr:`Retention.evicted` (the workers role sets it
to read the local copy's gates when this node holds one); without a copy nobody is excluded, and
an evicted node keeps pinning the log until a node holding a copy runs the duty.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext

from shared import logs
from shared.coordination import Coordination, CoordinationUnavailable, OutcomeUnknown, RevisionConflict
from shared.estate._alarms import Alarms
from shared.estate.life._trim import (
    TrimConclusion,
    conclude,
    counted_positions,
    decode_record,
    read_age_floor,
    read_backup_floor,
    read_min_hold,
    snapshot_floor,
)
from shared.estate.log import GENERATION, STREAMS
from shared.leases import live_data_nodes

__all__ = [
    "TRIMMED_DOMAINS",
    "FloorPublish",
    "Retention",
    "RetentionSettings",
    "publish_floor",
    "purge_below",
]

_log = logs.get("statelog")

TRIMMED_DOMAINS: tuple[str, ...] = ("tracker", "pages")
"""The logs the duty trims (ES-47: the vectors and usage logs are bounded by the broker)."""


@dataclass(frozen=True)
class RetentionSettings:
    """What a tick needs from the node file (all durations in seconds).

    Attributes:
        backup_floor: ``engine`` or ``operator`` (``retention.backup_floor``).
        backup_max_age: ``retention.backup_max_age``.
        min_age: ``stream.tracker_retention.min_age``.
    """

    backup_floor: str = "engine"
    backup_max_age: float = 86_400.0
    min_age: float = 7 * 86_400.0

    @classmethod
    def from_config(cls, cfg: Any) -> RetentionSettings:
        """Read them from a ``NodeConfig``."""
        return cls(
            backup_floor=cfg.retention.backup_floor,
            backup_max_age=float(cfg.retention.backup_max_age),
            min_age=float(cfg.stream.tracker_retention.min_age),
        )


@dataclass(frozen=True)
class FloorPublish:
    """The outcome of publishing one domain's floor.

    Attributes:
        published: True when the record is stored (acknowledged, or re-read after an unknown
            outcome); False means nothing may be deleted on this tick.
        floor: The floor the stored record names (the old one when the point was lower).
        record: The record written (or the one found).
        error: Why it was not published.
    """

    published: bool
    floor: int
    record: dict[str, Any]
    error: str = ""


async def publish_floor(
    coord: Coordination,
    domain: str,
    conclusion: TrimConclusion,
    *,
    first_seq: int,
    by: str,
    attempts: int = 4,
) -> FloorPublish:
    """Publish ``domain``'s floor to ``trim_floors`` before anything is deleted (ES-48).

    The stored floor is ``max(old floor, point)`` within this generation (an older generation's
    floor is not carried); a blocked conclusion keeps the old floor and stores ``trim_to`` 0.

    Args:
        coord: The coordination store.
        domain: ``tracker`` or ``pages``.
        conclusion: This tick's conclusion.
        first_seq: The log's first sequence as read this tick.
        by: This node's id.
        attempts: Compare-and-set attempts against a concurrent writer.

    Returns:
        The outcome; ``published`` False when the store could not be asked or kept moving.
    """
    record: dict[str, Any] = {}
    for _ in range(attempts):
        try:
            entry = await coord.get("trim_floors", domain)
        except CoordinationUnavailable as e:
            return FloorPublish(False, 0, record, f"trim_floors unreadable: {e}")
        old = decode_record(entry.value) if entry is not None else None
        old_floor = 0
        if old is not None and int(old.get("generation") or 0) == GENERATION:
            f = old.get("floor")
            old_floor = int(f) if isinstance(f, int) and f >= 0 else 0
        floor = old_floor if conclusion.blocked else max(old_floor, conclusion.point)
        record = {
            "domain": domain,
            "stream": STREAMS[domain],
            "generation": GENERATION,
            "floor": floor,
            "first_seq": first_seq,
            "terms": dict(conclusion.terms),
            "blocked_by": list(conclusion.blocked_by),
            "trim_to": 0 if conclusion.blocked else conclusion.point,
            "at": int(time.time() * 1_000_000),
            "by": by,
        }
        raw = json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
        try:
            if entry is None:
                await coord.create("trim_floors", domain, raw)
            else:
                await coord.update("trim_floors", domain, raw, revision=entry.revision)
            return FloorPublish(True, floor, record)
        except RevisionConflict:
            continue  # another writer moved it: re-read, never lower what it stored
        except OutcomeUnknown as e:
            try:
                now = await coord.get("trim_floors", domain)
            except CoordinationUnavailable:
                return FloorPublish(False, floor, record, f"publish unanswered: {e}")
            if now is not None and decode_record(now.value) == record:
                return FloorPublish(True, floor, record)
            return FloorPublish(False, floor, record, f"publish unanswered and not found: {e}")
        except CoordinationUnavailable as e:
            return FloorPublish(False, floor, record, f"trim_floors unwritable: {e}")
    return FloorPublish(False, 0, record, "trim_floors kept changing under the compare-and-set")


async def purge_below(js: JetStreamContext, domain: str, point: int) -> int:
    """Delete every record ``<= point`` of ``domain``'s log; return how many went.

    ``purge_stream(seq=point + 1)`` keeps records ``>= point + 1`` (nats-py answers only success,
    so the count is the difference of the stream's message counts around the purge).

    Raises:
        nats.errors.Error: the broker refused or did not answer (nothing is assumed deleted).
    """
    stream = STREAMS[domain]
    before = await js.stream_info(stream)
    if point + 1 <= int(before.state.first_seq or 0):
        return 0
    await js.purge_stream(stream, seq=point + 1)
    after = await js.stream_info(stream)
    return max(0, int(before.state.messages or 0) - int(after.state.messages or 0))


class Retention:
    """The trim tick of the ``worker:retention`` duty (ES-47, ES-48).

    Args:
        coord: The coordination store (``positions``, ``trim_floors``, ``trim_holds``, ``backups``,
            ``leases``).
        js: The JetStream context of the node's connection (``ctx.link.js``).
        node_id: This node's id (``by`` in the floor record).
        settings: The node file's retention settings.

    Attributes:
        alarms: This duty's alarms (``trim_blocked``).
        last: Domain → the last record published (or attempted) by this node.
        evicted: ``(domain, now_us) -> nodes`` evicted long enough ago to stop counting, or None;
            a failure is logged and excludes nobody (the node keeps pinning: safe).
    """

    def __init__(
        self, coord: Coordination, js: JetStreamContext, *, node_id: str, settings: RetentionSettings
    ) -> None:
        self._coord = coord
        self._js = js
        self._node = node_id
        self.settings = settings
        self.alarms = Alarms()
        self.last: dict[str, dict[str, Any]] = {}
        self.evicted: Callable[[str, int], Awaitable[Iterable[str]]] | None = None

    async def live_data_nodes(self) -> list[str]:
        """Nodes whose presence lease names role ``data`` (ES-47's live data nodes).

        Raises:
            CoordinationUnavailable: the leases could not be read.
        """
        return await live_data_nodes(self._coord)

    async def terms(
        self, domain: str, *, now_us: int | None = None, excluded: Iterable[str] = ()
    ) -> tuple[dict[str, Any], int]:
        """Read ``domain``'s six terms; return ``(terms, first_seq)`` (``first_seq`` 0 when unread)."""
        values: dict[str, Any] = {}
        try:
            live = await self.live_data_nodes()
            counted = await counted_positions(self._coord, domain, live_data_nodes=live, excluded=excluded)
        except CoordinationUnavailable:
            values["applied"] = "unreadable"
            values["snapshot_floor"] = "unreadable"
        else:
            values["applied"] = min((r["seq"] for r in counted.values()), default=0)
            values["snapshot_floor"] = snapshot_floor(counted)
        values["min_hold"] = await read_min_hold(self._coord, domain)
        values["backup_floor"] = await read_backup_floor(
            self._coord,
            domain,
            mode=self.settings.backup_floor,
            max_age=self.settings.backup_max_age,
            now_us=now_us,
        )
        values["feed_ack_floor"] = "n/a"  # no wake feed consumes the state logs here (see _trim)
        age, first, _last = await read_age_floor(
            self._js, domain, min_age=self.settings.min_age, now_us=now_us
        )
        values["age_floor"] = age
        return values, first

    async def trim(
        self, domain: str, *, now_us: int | None = None, excluded: Iterable[str] = ()
    ) -> dict[str, Any]:
        """Run one domain's trim: conclude, publish the floor, then purge (ES-48).

        Returns:
            ``{"domain", "floor", "trim_to", "blocked_by", "terms", "published", "purged", "error"}``.
        """
        if domain not in TRIMMED_DOMAINS:
            raise ValueError(
                f"domain {domain!r} is not trimmed by this duty (only {', '.join(TRIMMED_DOMAINS)})"
            )
        ex = set(excluded)
        if self.evicted is not None:
            try:
                now = int(time.time() * 1_000_000) if now_us is None else now_us
                ex |= set(await self.evicted(domain, now))
            except Exception as e:  # noqa: BLE001 - unknown gates: nobody excluded, nothing unsafe
                _log.warning("statelog_trim_gates_unread", domain=domain, error=f"{type(e).__name__}: {e}")
        values, first = await self.terms(domain, now_us=now_us, excluded=ex)
        conclusion = conclude(values)
        pub = await publish_floor(self._coord, domain, conclusion, first_seq=first, by=self._node)
        self.last[domain] = pub.record
        out: dict[str, Any] = {
            "domain": domain,
            "floor": pub.floor,
            "trim_to": 0 if conclusion.blocked else conclusion.point,
            "blocked_by": conclusion.blocked_by,
            "terms": conclusion.terms,
            "published": pub.published,
            "purged": 0,
            "error": pub.error,
        }
        if not pub.published:
            _log.warning("statelog_trim_unpublished", domain=domain, error=pub.error)
            return out
        if conclusion.blocked or conclusion.point <= max(first - 1, 0):
            return out
        try:
            purged = await purge_below(self._js, domain, conclusion.point)
        except (TimeoutError, nats.errors.Error, nats.js.errors.Error) as e:
            out["error"] = f"purge failed: {type(e).__name__}: {e}"
            _log.warning("statelog_trim_purge_failed", domain=domain, floor=pub.floor, error=out["error"])
            return out
        out["purged"] = purged
        _log.info("statelog_trimmed", domain=domain, floor=pub.floor, trim_to=conclusion.point, purged=purged)
        await self._note_first(domain, conclusion.point + 1)
        return out

    async def _note_first(self, domain: str, first_seq: int) -> None:
        """Refresh ``first_seq`` in the floor record after a purge (best effort: status display only)."""
        # a lost race or an unreadable store only delays the display: the next tick writes it again
        with contextlib.suppress(CoordinationUnavailable, RevisionConflict, OutcomeUnknown):
            entry = await self._coord.get("trim_floors", domain)
            row = decode_record(entry.value) if entry is not None else None
            if entry is None or row is None or int(row.get("first_seq") or 0) >= first_seq:
                return
            row["first_seq"] = first_seq
            await self._coord.update(
                "trim_floors",
                domain,
                json.dumps(row, separators=(",", ":"), sort_keys=True).encode(),
                revision=entry.revision,
            )

    async def tick(
        self, *, now_us: int | None = None, excluded: Iterable[str] = ()
    ) -> dict[str, dict[str, Any]]:
        """Trim every trimmed domain once and evaluate ``trim_blocked`` (ES-48, ES-92).

        Args:
            now_us: Now, unix microseconds (tests pass a later instant rather than wait out ``min_age``).
            excluded: Nodes that no longer count (evicted past the grace).

        Returns:
            Domain → :meth:`trim`'s answer.
        """
        ex = list(excluded)
        results = {d: await self.trim(d, now_us=now_us, excluded=ex) for d in TRIMMED_DOMAINS}
        blocked = {d: r["blocked_by"] for d, r in results.items() if r["blocked_by"]}
        self.alarms.set(
            "trim_blocked",
            bool(blocked),
            blocked_by=blocked,
            floors={d: r["floor"] for d, r in results.items()},
        )
        return results
