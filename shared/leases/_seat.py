"""The seat lease protocol on the coordination KV: claim, renew, release (FL-48..FL-51).

One lease per seat, key ``seat.{handle}`` in the ``leases`` bucket, whose age is the lease TTL
(FL-34): a renewal is a compare-and-set write, which restarts the key's age; nothing here ever
sets a per-key TTL. The epoch counter is in the ``epochs`` bucket (:mod:`._epochs`).

A claim is three writes (FL-50):

1. win the ownership key in a CLAIMING state (this owner, epoch 0, a per-call nonce) by KV
   ``create`` — only the single winner goes on;
2. advance the counter in ``epochs`` by compare-and-set (so no two grants share an epoch);
3. commit the new epoch into the held ownership record by compare-and-set at step 1's revision.

Ownership is decided from each write's reply, never from a read (DESIGN.md). A write whose reply
was lost (:class:`~shared.coordination.OutcomeUnknown`) may have landed, so the key is re-read and
the write recognised by its owner and nonce before anything is decided; a conflict right after
such a write may be against our own landed write, and is recognised the same way (infra-facts §3,
N1). The server's 10164 is translated to *unknown* by the coordination seam and never reads as
"lost" here.

What is *not* guaranteed: a lease says who may act, not who is acting. A holder that stops
renewing loses the key at the TTL whether or not it still runs; fencing (the epoch) is what keeps a
zombie's late writes out (FL-74), and admission freshness (:mod:`._host`) is what keeps it from
starting new work.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from shared.coordination import Coordination, CoordinationUnavailable, OutcomeUnknown, RevisionConflict

from ._epochs import EpochRecord, read_epoch
from ._errors import LeaseContention
from ._records import LeaseRecord, key_of

__all__ = ["CAS_ROUNDS", "Grant", "SeatLease", "SeatLeases"]

CAS_ROUNDS = 64
"""Compare-and-set rounds per lease operation (FL-51); exhausting them is *unknown*."""

_SIBLING_WAIT = 0.05  # seconds between looks at a same-owner CLAIMING sibling (FL-50)


@dataclass(frozen=True)
class Grant:
    """A seat this owner holds.

    Attributes:
        handle: The seat handle.
        epoch: The fencing token of this tenure (≥ 1).
        revision: The lease key's revision after our last acknowledged write.
        sent_at: The local monotonic time (seconds) at which that write was sent. The store wrote
            it no earlier, so the lease lives at least until ``sent_at + TTL`` on the store's clock
            (give or take clock rate); admission freshness is measured from it (FL-72).
    """

    handle: str
    epoch: int
    revision: int
    sent_at: float


@dataclass(frozen=True)
class SeatLease:
    """A seat lease as read back (FL-48).

    Attributes:
        handle: The seat handle.
        record: The stored record (resource, owner, node = the holder's node id, epoch, TTL,
            protocol, meta).
        revision: The key's revision.
        written_at: When the store wrote it (the broker's clock, FL-36).
        expires_at: ``written_at`` + the bucket's age: when the store ages it out unless renewed.
        preferred: The placement hint from the ``epochs`` bucket (FL-54), "" when never granted.
    """

    handle: str
    record: LeaseRecord
    revision: int
    written_at: datetime
    expires_at: datetime
    preferred: str

    @property
    def claiming(self) -> bool:
        """True while the holder is between steps 1 and 3 of a claim (epoch 0, FL-50)."""
        return self.record.epoch == 0


def _retrieve(task: asyncio.Future[tuple[EpochRecord, int]]) -> None:
    """Consume a prefetched read's error when the claim ended before using it (no asyncio warning)."""
    if not task.cancelled():
        task.exception()


@dataclass(frozen=True)
class _Settled:
    """A claim that ended in step 1: our own hold re-confirmed (its grant), or None (another owner)."""

    grant: Grant | None


class _Rounds:
    """The compare-and-set rounds one claim may spend across its three steps (FL-50)."""

    def __init__(self, resource: str, limit: int) -> None:
        self.resource = resource
        self.limit = limit
        self.spent = 0

    def spend(self) -> None:
        """Count one round.

        Raises:
            LeaseContention: more than ``limit`` rounds.
        """
        self.spent += 1
        if self.spent > self.limit:
            raise LeaseContention(self.resource, self.limit)


class SeatLeases:
    """The seat lease operations of one owner incarnation (FL-48..FL-51).

    Stateless apart from the nonces of claims in flight: the caller keeps its grants. Two
    concurrent claims of one seat by this owner do not race each other: the later one waits for
    the sibling's CLAIMING record to resolve and then adopts the same epoch (FL-50).

    Args:
        coord: The coordination store.
        node_id: This node's stable id (written as ``node`` and ``preferred``, FL-54).
        owner: This incarnation ``{node_id}:{8 hex}`` (FL-10); only it renews.
        protocol: This build's lease protocol (FL-133), written into every record.
        ttl: The lease TTL (the ``leases`` bucket's age), recorded in the record (FL-48).
        rounds: Compare-and-set rounds per operation (FL-51: 64).
        clock: Monotonic clock in seconds.
    """

    def __init__(
        self,
        coord: Coordination,
        *,
        node_id: str,
        owner: str,
        protocol: int,
        ttl: timedelta,
        rounds: int = CAS_ROUNDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._coord = coord
        self._node = node_id
        self._owner = owner
        self._protocol = protocol
        self._ttl = ttl
        self._rounds = rounds
        self._clock = clock
        self._inflight: dict[str, set[str]] = {}  # handle → nonces of claims running in this process

    @property
    def owner(self) -> str:
        """This incarnation's owner string."""
        return self._owner

    def _record(self, handle: str, epoch: int, nonce: str = "") -> bytes:
        meta = {"claim": nonce} if nonce else {}
        return LeaseRecord(
            f"seat:{handle}", self._owner, self._node, epoch, self._protocol, meta, self._ttl.total_seconds()
        ).encode()

    async def read(self, handle: str) -> SeatLease | None:
        """Read a seat's lease as the store holds it now (FL-48), for views and tests.

        Never use this to decide ownership: that comes from a write's reply (DESIGN.md).

        Returns:
            The lease, or None when nobody holds the seat.

        Raises:
            CoordinationUnavailable: the store could not be asked.
        """
        key = key_of(f"seat:{handle}")
        entry = await self._coord.get("leases", key)
        if entry is None:
            return None
        hint, _ = await read_epoch(self._coord, f"seat:{handle}")
        return SeatLease(
            handle,
            LeaseRecord.decode(key, entry.value),
            entry.revision,
            entry.created,
            entry.created + self._ttl,
            hint.preferred,
        )

    async def acquire(self, handle: str) -> Grant | None:
        """Claim ``handle`` (FL-50), or adopt this incarnation's own unbroken hold (same epoch).

        Returns:
            The grant; None when another owner holds the seat (or wins it while we try).

        Raises:
            LeaseContention: every compare-and-set round was lost (unknown, FL-51).
            CoordinationUnavailable: the store could not be asked; the seat may or may not be
                ours (a later call resolves it: our own CLAIMING or committed record is adopted).
        """
        nonce = secrets.token_hex(6)
        running = self._inflight.setdefault(handle, set())
        running.add(nonce)
        try:
            return await self._acquire(handle, nonce)
        finally:
            running.discard(nonce)
            if not running:
                self._inflight.pop(handle, None)

    async def _acquire(self, handle: str, nonce: str) -> Grant | None:
        # The counter's first read goes out beside step 1's create instead of after it: reading is
        # no step of FL-50 (only the CAS that follows must come after step 1's win, and it still
        # does; a counter moved meanwhile fails that CAS, and the round re-reads). A claim of a
        # free seat then waits for three writes, not three writes and a read.
        counter: asyncio.Future[tuple[EpochRecord, int]] = asyncio.ensure_future(
            read_epoch(self._coord, f"seat:{handle}")
        )
        counter.add_done_callback(_retrieve)
        try:
            return await self._claim(handle, nonce, counter)
        finally:
            counter.cancel()

    async def _claim(
        self, handle: str, nonce: str, counter: asyncio.Future[tuple[EpochRecord, int]] | None
    ) -> Grant | None:
        rounds = _Rounds(f"seat:{handle}", self._rounds)
        claimed = await self._claiming(handle, nonce, rounds)
        if isinstance(claimed, _Settled):
            return claimed.grant
        epoch = await self._advance(handle, nonce, counter, rounds)
        return await self._commit(handle, nonce, epoch, claimed, rounds)

    async def _claiming(self, handle: str, nonce: str, rounds: _Rounds) -> int | _Settled:
        """Step 1: the ownership key in a CLAIMING state; its revision, or how the claim settled.

        The first round creates it without reading first: a free seat (what a sweep claims) then
        costs the three writes of FL-50. A create refused (the key exists) or unknown leaves the
        revision 0 for the read below, which decides as before: somebody else's record, our own
        hold, or our own landed write.
        """
        key = key_of(rounds.resource)
        claim_rev = 0
        with contextlib.suppress(RevisionConflict, OutcomeUnknown):
            claim_rev = await self._coord.create("leases", key, self._record(handle, 0, nonce))
        while claim_rev == 0:
            rounds.spend()
            entry = await self._coord.get("leases", key)
            if entry is not None:
                rec = LeaseRecord.decode(key, entry.value)
                if rec.owner != self._owner:
                    return _Settled(None)  # another owner holds it (or is claiming it)
                if rec.epoch > 0:  # our own unbroken hold: it keeps its epoch (FL-50)
                    return _Settled(await self._adopt(handle, rec.epoch, entry.revision, rounds.spent))
                theirs = str(rec.meta.get("claim", ""))
                if theirs != nonce and theirs in self._inflight.get(handle, ()):
                    await asyncio.sleep(_SIBLING_WAIT)  # a sibling claim of ours runs: retry, never take over
                    continue
                # our own CLAIMING record: this call's (a lost reply) or a claim of ours that died
                # between its steps; this incarnation may finish it under the new nonce
                try:
                    claim_rev = await self._coord.update(
                        "leases", key, self._record(handle, 0, nonce), revision=entry.revision
                    )
                except (RevisionConflict, OutcomeUnknown):
                    continue
                break
            try:
                claim_rev = await self._coord.create("leases", key, self._record(handle, 0, nonce))
            except (RevisionConflict, OutcomeUnknown):
                continue  # the re-read decides: somebody else's, or our own landed write
        return claim_rev

    async def _advance(
        self,
        handle: str,
        nonce: str,
        counter: asyncio.Future[tuple[EpochRecord, int]] | None,
        rounds: _Rounds,
    ) -> int:
        """Step 2: advance the epoch counter; only the winner of step 1 gets here. Returns the epoch."""
        key = key_of(rounds.resource)
        epoch = 0
        while epoch == 0:
            rounds.spend()
            read: tuple[EpochRecord, int] | None = None
            if counter is not None:  # the first round: the read sent beside step 1
                prefetched, counter = counter, None
                with contextlib.suppress(CoordinationUnavailable):  # failed early: read again now
                    read = await prefetched
            current, counter_rev = read or await read_epoch(self._coord, rounds.resource)
            if current.owner == self._owner and current.claim == nonce:
                epoch = current.epoch  # our own write whose reply was lost
                break
            nxt = EpochRecord(current.epoch + 1, self._node, self._owner, nonce)
            try:
                await self._coord.update("epochs", key, nxt.encode(), revision=counter_rev)
            except (RevisionConflict, OutcomeUnknown):
                continue
            epoch = nxt.epoch
        return epoch

    async def _commit(
        self, handle: str, nonce: str, epoch: int, claim_rev: int, rounds: _Rounds
    ) -> Grant | None:
        """Step 3: commit the epoch into the ownership record at step 1's revision."""
        key = key_of(rounds.resource)
        while True:
            rounds.spend()
            sent = self._clock()
            try:
                rev = await self._coord.update("leases", key, self._record(handle, epoch), revision=claim_rev)
                return Grant(handle, epoch, rev, sent)
            except (RevisionConflict, OutcomeUnknown):
                pass
            entry = await self._coord.get("leases", key)
            if entry is None:
                return None  # our CLAIMING record lapsed: the epoch is burned (a harmless gap)
            rec = LeaseRecord.decode(key, entry.value)
            if rec.owner != self._owner:
                return None
            if rec.epoch == epoch:  # our commit landed; confirm with a write whose reply we see
                return await self._adopt(handle, epoch, entry.revision, rounds.spent)
            if rec.epoch != 0 or rec.meta.get("claim") != nonce:
                return None
            claim_rev = entry.revision

    async def _adopt(self, handle: str, epoch: int, revision: int, spent: int) -> Grant | None:
        """Confirm this incarnation's own record by a write (never by the read that found it)."""
        return await self._renew(Grant(handle, epoch, revision, 0.0), spent)

    async def renew(self, grant: Grant) -> Grant | None:
        """Renew one seat by compare-and-set at the held revision (FL-50, FL-53).

        Returns:
            The grant at its new revision and send time; None when the lease lapsed, moved or was
            superseded (a definitive *no*: release fenced).

        Raises:
            LeaseContention: every round was lost (unknown).
            CoordinationUnavailable: the store could not be asked (unknown: keep the seat, admit
                nothing new, retry next heartbeat).
        """
        return await self._renew(grant, 0)

    async def _renew(self, grant: Grant, spent: int) -> Grant | None:
        resource = f"seat:{grant.handle}"
        key = key_of(resource)
        while True:
            spent += 1
            if spent > self._rounds:
                raise LeaseContention(resource, self._rounds)
            sent = self._clock()
            try:
                rev = await self._coord.update(
                    "leases", key, self._record(grant.handle, grant.epoch), revision=grant.revision
                )
                return replace(grant, revision=rev, sent_at=sent)
            except (RevisionConflict, OutcomeUnknown):
                pass
            entry = await self._coord.get("leases", key)
            if entry is None:
                return None
            rec = LeaseRecord.decode(key, entry.value)
            if rec.owner != self._owner or rec.epoch != grant.epoch:
                return None
            # Ours: either the write did not land (same revision) or an earlier one of ours did
            # (a newer revision). Either way, write again at what is there.
            grant = replace(grant, revision=entry.revision)

    async def release(self, grant: Grant) -> bool:
        """Give a seat up, fenced: delete the lease key only at the held revision (FL-49, FL-66).

        The epoch counter is never touched, so the next grant still rises.

        Returns:
            True when this call removed our lease; False when it was no longer ours (lapsed or
            taken): nothing was deleted.

        Raises:
            LeaseContention: every round was lost.
            CoordinationUnavailable: unknown; the lease lapses at the TTL on its own.
        """
        resource = f"seat:{grant.handle}"
        key = key_of(resource)
        revision = grant.revision
        unknown = False
        for _ in range(self._rounds):
            try:
                await self._coord.delete("leases", key, revision=revision)
                return True
            except RevisionConflict:
                pass
            except OutcomeUnknown:
                unknown = True
            entry = await self._coord.get("leases", key)
            if entry is None:
                # gone: only a delete of ours whose answer was lost can have removed it; otherwise it
                # lapsed, was released already or never held: nothing was handed back (issue 35)
                return unknown
            rec = LeaseRecord.decode(key, entry.value)
            if rec.owner != self._owner or rec.epoch != grant.epoch:
                return False
            revision = entry.revision
        raise LeaseContention(resource, self._rounds)
