"""The per-resource epoch counter in the ``epochs`` bucket, and the fencing check (FL-49, FL-50, FL-74).

The counter lives apart from the lease key: the ``leases`` bucket ages keys out at the lease TTL,
the ``epochs`` bucket has no age, so the counter outlives every lapse and release. It only rises:
every grant advances it by compare-and-set, so no two tenures ever share an epoch, and a zombie of
an earlier tenure carries a token strictly below the current one. Gaps (a claim that advanced the
counter and then lost the ownership key) are harmless; a reset would be a correctness bug.

The record is JSON ``{"epoch": 7, "preferred": "n1", "owner": "n1:9f2c41aa", "claim": "<nonce>"}``:
``preferred`` is the placement hint (FL-54: it orders a sweep, never gates it); ``owner`` and
``claim`` identify the grant that wrote it, so a write whose reply was lost can be recognised on a
re-read (infra-facts N1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from shared.coordination import Coordination

from ._records import key_of

__all__ = ["EpochRecord", "check_epoch", "current_epoch", "read_epoch"]


@dataclass(frozen=True)
class EpochRecord:
    """One resource's epoch counter as stored.

    Attributes:
        epoch: The last epoch granted (0 when never granted).
        preferred: The node id the resource was last granted to (the placement hint), or "".
        owner: The incarnation ``{node_id}:{8 hex}`` that advanced it last, or "".
        claim: The nonce of the grant that advanced it last, or "".
    """

    epoch: int = 0
    preferred: str = ""
    owner: str = ""
    claim: str = ""

    def encode(self) -> bytes:
        """Serialise to the stored JSON bytes."""
        return json.dumps(
            {"epoch": self.epoch, "preferred": self.preferred, "owner": self.owner, "claim": self.claim},
            separators=(",", ":"),
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> EpochRecord:
        """Parse stored bytes; a malformed record reads as epoch 0 with no hint."""
        try:
            data = json.loads(raw)
        except ValueError:
            return cls()
        if not isinstance(data, dict):
            return cls()
        epoch = data.get("epoch")
        return cls(
            epoch=epoch if isinstance(epoch, int) and epoch > 0 else 0,
            preferred=str(data.get("preferred") or ""),
            owner=str(data.get("owner") or ""),
            claim=str(data.get("claim") or ""),
        )


async def read_epoch(coord: Coordination, resource: str) -> tuple[EpochRecord, int]:
    """Read ``resource``'s counter.

    Args:
        coord: The coordination store.
        resource: ``seat:{handle}``, ``worker:{duty}``.

    Returns:
        ``(record, revision)``; revision 0 and an empty record when the counter was never written.
        An unreadable stored counter reads as its key's revision, which is never below the last
        epoch granted (a reset would hand a zombie a token the new owner also holds, FL-49).

    Raises:
        CoordinationUnavailable: the store could not be asked.
    """
    entry = await coord.get("epochs", key_of(resource))
    if entry is None:
        return EpochRecord(), 0
    record = EpochRecord.decode(entry.value)
    if record.epoch == 0:
        # A written counter always holds an epoch ≥ 1, so this one is unreadable. Never reset it:
        # every grant wrote this key once, so its revision (a sequence that only rises) is at
        # least the last epoch granted, and serves as the floor.
        record = EpochRecord(epoch=entry.revision)
    return record, entry.revision


async def current_epoch(coord: Coordination, handle: str) -> int:
    """Return the seat's current epoch: the last one granted (0 if it was never granted).

    Args:
        coord: The coordination store.
        handle: The seat handle.

    Raises:
        CoordinationUnavailable: the store could not be asked.
    """
    record, _ = await read_epoch(coord, f"seat:{handle}")
    return record.epoch


async def check_epoch(coord: Coordination, handle: str, epoch: int) -> bool:
    """Decide whether a write made under ``epoch`` may land for ``handle`` (FL-74, FL-70).

    A data node refuses a write whose epoch is older than the seat's current one: the counter is
    advanced at every grant *before* the new owner commits, so a zombie of an earlier tenure is
    refused from the moment a successor won the ownership key. Epoch 0 is never a usable fencing
    token (FL-50).

    Args:
        coord: The coordination store.
        handle: The seat handle.
        epoch: The epoch the writer holds (or held).

    Returns:
        True when ``epoch`` is at least the seat's current epoch; False when it is older, or not a
        usable token (≤ 0).

    Raises:
        CoordinationUnavailable: the store could not be asked: *unknown*, never a refusal (FL-32);
            the caller decides its own failure direction.
    """
    if epoch <= 0:
        return False
    return epoch >= await current_epoch(coord, handle)
