"""Singleton duty leases ``worker:{duty}``, claimed per tick (FL-19, FL-91..FL-95).

Each duty loop, on each tick, calls :meth:`Duties.try_acquire`; it runs the tick only if it holds
the lease. There is no handoff protocol: a dead holder's lease lapses and a peer wins a later tick;
a draining node gives each duty back after that loop's last tick (FL-95).

Records live in the ``duties`` bucket, whose age is the duty ceiling (3 h), with the duty's own
TTL in the record (FL-92). Expiry is judged on the broker's clock (FL-36): "now" is the server
timestamp of a write this node just made (a ``clock.<node>`` key in the same bucket), compared
with the server timestamp of the holder's last write plus its TTL. The epoch comes from the
``epochs`` counter (key ``worker.<duty>``), advanced by compare-and-set on every change of holder,
so it only rises.

A node without the ``workers`` role *refuses* every duty (FL-19): "no duty gate" would mean
"single node, always mine", so a node configured without the role must not merely abstain. The
refusal is silent. Duty claims skip the protocol gate but carry this build's protocol (FL-91).
"""

from __future__ import annotations

import json
from datetime import timedelta

from shared import logs
from shared.coordination import (
    DUTY_CEILING,
    Coordination,
    CoordinationUnavailable,
    OutcomeUnknown,
    RevisionConflict,
)

from ._epochs import EpochRecord

__all__ = ["DUTY_TTLS", "Duties", "DutyTTLTooLong"]

DUTY_TTLS: dict[str, timedelta] = {
    "scheduler": timedelta(seconds=30),
    "maintenance": timedelta(minutes=45),
    "retention": timedelta(minutes=45),  # ES-48: worker:retention
    "skill-curator": timedelta(hours=3),
}
"""The duty TTLs of FL-92; other duties use the lease TTL (ours)."""

_log = logs.get("coord.duties")


class DutyTTLTooLong(ValueError):
    """A duty TTL above the duty ceiling (3 h) is a code error, never clamped (FL-92)."""


class Duties:
    """This node's view of the singleton duties.

    Args:
        coord: The coordination store.
        node_id: This node's id.
        owner: This incarnation's owner string (FL-10).
        protocol: This build's lease protocol.
        workers: Whether this node has the ``workers`` role; without it every duty is refused.
        lease_ttl: The seat lease TTL, the default duty TTL.
    """

    def __init__(
        self,
        coord: Coordination,
        *,
        node_id: str,
        owner: str,
        protocol: int,
        workers: bool,
        lease_ttl: timedelta,
    ) -> None:
        self._coord = coord
        self._node = node_id
        self._owner = owner
        self._protocol = protocol
        self._workers = workers
        self._lease_ttl = lease_ttl
        self._held: dict[str, tuple[int, int]] = {}  # duty -> (revision, epoch)

    def ttl(self, duty: str) -> timedelta:
        """The duty's TTL (FL-92).

        Raises:
            DutyTTLTooLong: the table names a TTL above the 3 h ceiling.
        """
        ttl = DUTY_TTLS.get(duty, self._lease_ttl)
        if ttl > DUTY_CEILING:
            raise DutyTTLTooLong(f"duty {duty!r} TTL {ttl} exceeds the {DUTY_CEILING} ceiling")
        return ttl

    def held(self) -> dict[str, int]:
        """Duties this node believes it holds → epoch."""
        return {d: e for d, (_, e) in self._held.items()}

    async def _server_now(self) -> float:
        key = f"clock.{self._node}"
        await self._coord.put("duties", key, b"t")  # non-empty: an empty payload reads back as no value
        entry = await self._coord.get("duties", key)
        if entry is None:
            raise CoordinationUnavailable("the clock probe vanished")
        return entry.created.timestamp()

    async def _next_epoch(self, duty: str) -> int:
        key = f"worker.{duty}"
        for _ in range(16):
            entry = await self._coord.get("epochs", key)
            rec = EpochRecord.decode(entry.value) if entry is not None else EpochRecord()
            nxt = EpochRecord(epoch=rec.epoch + 1, preferred=self._node, owner=self._owner)
            try:
                await self._coord.update("epochs", key, nxt.encode(), revision=entry.revision if entry else 0)
                return nxt.epoch
            except RevisionConflict:
                continue
        raise CoordinationUnavailable(f"epoch counter of worker:{duty} is contended")

    def _record(self, duty: str, epoch: int) -> bytes:
        return json.dumps(
            {
                "resource": f"worker:{duty}",
                "owner": self._owner,
                "node": self._node,
                "epoch": epoch,
                "protocol": self._protocol,
                "ttl": self.ttl(duty).total_seconds(),
            },
            separators=(",", ":"),
            sort_keys=True,
        ).encode()

    async def try_acquire(self, duty: str) -> int | None:
        """Hold ``worker:{duty}`` for this tick; the same owner keeps its epoch (FL-91).

        Returns:
            The epoch when this node holds the duty; None when a live peer holds it, or when this
            node has no ``workers`` role (a silent refusal, FL-19), or when ownership is unknown
            (the store could not be asked: unknown ownership is not ownership, FL-33).
        """
        if not self._workers:
            return None
        key = f"worker.{duty}"
        try:
            entry = await self._coord.get("duties", key)
            if entry is None:
                epoch = await self._next_epoch(duty)
                rev = await self._coord.create("duties", key, self._record(duty, epoch))
                self._held[duty] = (rev, epoch)
                _log.info("duty_claimed", duty=duty, epoch=epoch)
                return epoch
            data = json.loads(entry.value)
            if data.get("owner") == self._owner:
                epoch = int(data.get("epoch", 0))
                rev = await self._coord.update(
                    "duties", key, self._record(duty, epoch), revision=entry.revision
                )
                self._held[duty] = (rev, epoch)
                return epoch
            ttl = float(data.get("ttl") or self.ttl(duty).total_seconds())
            if entry.created.timestamp() + ttl > await self._server_now():
                self._held.pop(duty, None)
                return None
            epoch = await self._next_epoch(duty)
            rev = await self._coord.update("duties", key, self._record(duty, epoch), revision=entry.revision)
            self._held[duty] = (rev, epoch)
            _log.info("duty_claimed", duty=duty, epoch=epoch, previous_owner=data.get("owner", ""))
            return epoch
        except RevisionConflict:
            self._held.pop(duty, None)
            return None
        except (OutcomeUnknown, CoordinationUnavailable, ValueError) as e:
            self._held.pop(duty, None)
            _log.warning("duty_claim_unknown", duty=duty, error=str(e))
            return None

    async def release(self, duty: str) -> None:
        """Give ``duty`` back (drain, FL-95): delete the record at the revision this node wrote."""
        held = self._held.pop(duty, None)
        if held is None:
            return
        try:
            await self._coord.delete("duties", f"worker.{duty}", revision=held[0])
            _log.info("duty_released", duty=duty, epoch=held[1])
        except (RevisionConflict, CoordinationUnavailable):
            pass
