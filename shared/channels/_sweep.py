"""The channel sweep of the maintenance tick (CO-36, FL-99, FL-124).

``crewlet_channels`` has no bucket age (FL-124): retention here is a maintenance decision, made
from the times in the rows. Each tick:

- an ``open`` channel whose last activity is more than :data:`IDLE_CLOSE` (1 h, orig) ago is closed
  with reason ``idle`` (compare-and-set, guarded by the activity instant it read: an answer landing
  meanwhile wins and the sweep leaves that row alone), logged ``a2a_channel_closed{reason: idle}``;
- a ``closed`` channel closed more than :data:`CLOSED_RETENTION` (7 days, orig) ago is deleted at the
  revision read (a row changed since is left for the next tick), logged ``a2a_channel_deleted``.

An unreadable row is logged and left alone. Whoever holds the maintenance duty runs the sweep;
two sweeps racing are harmless (each write is a compare-and-set, a lost one is skipped).

Not guaranteed: the requester of an idle-closed channel is not woken (the sweep has no bus); its
seat learns of the silence only by asking again. A clock far behind the broker's delays closes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from shared import logs
from shared.coordination import Coordination, CoordinationUnavailable, RevisionConflict

from ._errors import ChannelRecordInvalid
from ._record import close_channel, list_channels

__all__ = ["CLOSED_RETENTION", "IDLE_CLOSE", "SweepReport", "sweep_channels"]

_log = logs.get("channels.sweep")

IDLE_CLOSE = timedelta(hours=1)
"""An open channel with no activity for this long is closed ``idle`` (CO-36, orig)."""

CLOSED_RETENTION = timedelta(days=7)
"""A closed channel's row is deleted this long after it closed (CO-36, orig)."""


@dataclass
class SweepReport:
    """What one sweep did.

    Attributes:
        closed: Ids of the channels closed ``idle``, in key order.
        deleted: Ids of the closed channels deleted.
        skipped: Ids left alone because a peer changed them first or the row is unreadable.
    """

    closed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


async def sweep_channels(coord: Coordination, now: datetime | None = None) -> SweepReport:
    """Close idle channels and delete long-closed ones (FL-99); call it once per maintenance tick.

    Args:
        coord: The coordination store.
        now: The sweep's instant (aware); None for the current time. Tests pass a frozen one.

    Returns:
        What was closed, deleted and skipped.

    Raises:
        CoordinationUnavailable: the listing could not be read (nothing was changed). A write that
            fails after the listing is logged ``a2a_sweep_failed`` and the row skipped.
        ValueError: ``now`` is naive.
    """
    at = now if now is not None else datetime.now(UTC)
    if at.tzinfo is None:
        raise ValueError("sweep_channels: now must be timezone-aware")
    report = SweepReport()
    for channel in await list_channels(coord):
        cid = channel.channel_id
        try:
            if channel.status == "open":
                idle_since = at - IDLE_CLOSE
                if channel.last_activity > idle_since:
                    continue
                closed = await close_channel(coord, cid, reason="idle", now=at, if_idle_since=idle_since)
                if closed is None:
                    report.skipped.append(cid)
                    continue
                report.closed.append(cid)
                _log.info(
                    "a2a_channel_closed",
                    channel_id=cid,
                    reason="idle",
                    requester=channel.requester,
                    target=channel.target,
                    idle_seconds=round((at - channel.last_activity).total_seconds()),
                )
                continue
            closed_at = channel.closed
            if closed_at is None or closed_at > at - CLOSED_RETENTION:
                continue
            try:
                await coord.delete("channels", cid, revision=channel.revision)
            except RevisionConflict:
                report.skipped.append(cid)
                continue
            report.deleted.append(cid)
            _log.info("a2a_channel_deleted", channel_id=cid, closed_at=channel.closed_at)
        except (CoordinationUnavailable, ChannelRecordInvalid) as e:
            _log.warning("a2a_sweep_failed", channel_id=cid, error=str(e))
            report.skipped.append(cid)
    return report
