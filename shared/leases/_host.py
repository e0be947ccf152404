"""The seat host: which seats this node holds, their heartbeat, admission and fences (FL-50..FL-74).

:class:`SeatHost` owns this incarnation's seat leases. It claims what the placement policy asks
for (FL-56 adds fair share later; the default policy claims every seat it is given), renews every
held lease each heartbeat (TTL/3, FL-52), and calls the caller's hooks: ``on_acquire`` after a
grant (attach the mailbox there, last, FL-65), ``on_release`` on every release (detach there),
``on_quiesce``/``on_resume`` on both edges of an unknown renew (FL-73).

Renew outcomes (FL-53): *yes* keeps the seat; *no* (lapsed, moved, superseded) releases it fenced
now, reason ``lease_lost``, logging ``seat_lost``; *unknown* keeps the seat, quiesces it (nothing
new is admitted) and retries each heartbeat, and once a full TTL has passed since the last
successful renew the lease has lapsed anyway: fenced release. A short store blip never releases a
seat.

Three questions, three strengths:

- :meth:`SeatHost.may_start` (admission, FL-72): the epoch only while the last successful renew is
  within one heartbeat and the seat is not quiesced. A turn admitted now is owned for at least
  TTL − heartbeat. A local "is it in my map" check is not admission.
- :meth:`SeatHost.may_continue` (the in-turn fence, FL-74): held, same epoch, renew fresh.
- :meth:`SeatHost.holds` (for inbox acks): held, same epoch, and the last successful write is
  less than one TTL old, so no successor can have won the key yet. A late ack from an older
  tenure is refused; a store blip does not turn a finished turn's ack into a 30-minute redelivery.

Undead seats (FL-68): when ``on_release`` raises, teardown is unproven: the seat leaves the held set
(nothing new starts) but its lease keeps being renewed, teardown is retried every heartbeat, the
lease is released the moment one succeeds, and ``seat_teardown_unproven`` is raised again every 20
heartbeats with the elapsed time.

Acquire backoff (FL-55): when ``on_acquire`` raises, the seat is released fenced
(``acquire_failed``) and not claimed again by this node for one TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

import anyio

from shared import logs
from shared.coordination import Coordination, CoordinationUnavailable

from ._host_loops import heartbeat_loop, renew_lead, sweep_loop
from ._host_state import (
    AcquireHook,
    HeldSeat,
    QuiesceHook,
    ReleaseHook,
    ResumeHook,
    Undead,
    noop,
    tend_undead,
)
from ._placement import FENCED_REASONS, ClaimAll, PlacementPolicy, ReleaseReason
from ._seat import Grant, SeatLeases

__all__ = ["SeatHost"]

_log = logs.get("seat.host")

_SWEEP_INTERVAL = 5.0  # FL-56: seconds between placement sweeps


class SeatHost:
    """This node's seat leases: claim, heartbeat, release, admission and fences (FL-50..FL-74).

    Args:
        coord: The coordination store.
        node_id: This node's stable id (the ``preferred`` hint, FL-54).
        owner: This incarnation ``{node_id}:{8 hex}`` (``ctx.owner``, FL-10).
        protocol: This build's lease protocol (FL-133).
        ttl: The lease TTL (``coordination.lease_ttl_seconds``); heartbeat = TTL/3 (FL-52).
        on_acquire: ``await on_acquire(handle, epoch)`` after a grant; attach the mailbox last in
            it (FL-65). Raising releases the seat fenced (``acquire_failed``) and backs off a TTL.
        on_release: ``await on_release(handle, reason)`` on every release; must be idempotent and
            tolerate half-built seats (FL-68). Raising makes the seat undead.
        on_quiesce: ``await on_quiesce(handle)`` at the first unknown renew: stop fetching (FL-73).
        on_resume: ``await on_resume(handle, epoch)`` at the next good renew: fetch again (FL-73).
        policy: The placement policy; :class:`ClaimAll` by default.
        sweep_interval: Seconds between placement sweeps (FL-56: 5 s).
        clock: Monotonic clock in seconds (tests may pass another).
        on_released: Called as ``on_released(handle, reason)`` after a voluntary release deleted
            the lease, so the fleet can be told a seat is free (peers sweep at once instead of on
            their timer; see :meth:`nudge`).
    """

    def __init__(
        self,
        coord: Coordination,
        *,
        node_id: str,
        owner: str,
        protocol: int,
        ttl: timedelta,
        on_acquire: AcquireHook | None = None,
        on_release: ReleaseHook | None = None,
        on_quiesce: QuiesceHook | None = None,
        on_resume: ResumeHook | None = None,
        policy: PlacementPolicy | None = None,
        sweep_interval: float = _SWEEP_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        on_released: ReleaseHook | None = None,
    ) -> None:
        self._leases = SeatLeases(
            coord, node_id=node_id, owner=owner, protocol=protocol, ttl=ttl, clock=clock
        )
        self._ttl = ttl.total_seconds()
        self._hb = self._ttl / 3
        self._on_acquire: AcquireHook = on_acquire or noop
        self._on_release: ReleaseHook = on_release or noop
        self._on_quiesce: QuiesceHook = on_quiesce or noop
        self._on_resume: ResumeHook = on_resume or noop
        self._policy: PlacementPolicy = policy or ClaimAll()
        self._sweep_interval = sweep_interval
        self._clock = clock
        self._on_released: ReleaseHook = on_released or noop
        self._nudged = asyncio.Event()
        self._held: dict[str, HeldSeat] = {}
        self._undead: dict[str, Undead] = {}
        self._backoff: dict[str, float] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._seats: list[str] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.last_claim: float | None = None
        self.last_loss: float | None = None
        self._stopping = False

    # -- intervals ---------------------------------------------------------------------------

    @property
    def heartbeat(self) -> float:
        """The heartbeat interval in seconds: TTL/3 (FL-52)."""
        return self._hb

    @property
    def leases(self) -> SeatLeases:
        """The lease operations underneath (for views and tests)."""
        return self._leases

    def _lock(self, handle: str) -> anyio.Lock:
        lock = self._locks.get(handle)
        if lock is None:
            lock = self._locks[handle] = anyio.Lock()
        return lock

    # -- the questions -----------------------------------------------------------------------

    def held(self) -> dict[str, int]:
        """Return the seats this node holds → epoch (undead seats are not held, FL-68)."""
        return {h: s.grant.epoch for h, s in self._held.items()}

    def may_start(self, handle: str) -> int | None:
        """Admission (FL-72): the seat's epoch if a new turn may start on it now, else None.

        True only while the last successful renew is within one heartbeat, the acquire hook has
        finished, the seat is not quiesced (FL-53) and not being released.
        """
        seat = self._held.get(handle)
        if seat is None or not seat.ready or seat.quiesced or seat.releasing:
            return None
        if self._clock() - seat.grant.sent_at > self._hb:
            return None
        return seat.grant.epoch

    def may_continue(self, handle: str, epoch: int) -> bool:
        """The in-turn fence (FL-74): still held, same epoch, renew fresh (within one heartbeat).

        Checked before every LLM round and write-capable tool call; False stops the turn before its
        next call and the delivery is deferred.
        """
        seat = self._held.get(handle)
        return (
            seat is not None and seat.grant.epoch == epoch and self._clock() - seat.grant.sent_at <= self._hb
        )

    def holds(self, handle: str, epoch: int) -> bool:
        """True while ``epoch`` is certainly still this node's tenure of ``handle``.

        Held, same epoch, and the last acknowledged lease write is less than one TTL old, so the
        store cannot have aged the key out and no successor can hold it. The fence for inbox acks
        and NAKs (:mod:`shared.bus`): JetStream accepts late acks, so the check is ours.
        """
        seat = self._held.get(handle)
        return (
            seat is not None and seat.grant.epoch == epoch and self._clock() - seat.grant.sent_at < self._ttl
        )

    def health(self) -> dict[str, Any]:
        """The ``seats`` block of ``/health`` (FL-126): held, quiesced, last claim/loss, unproven."""
        now = self._clock()
        return {
            "held": sorted(self._held),
            "quiesced": sorted(h for h, s in self._held.items() if s.quiesced),
            "last_claim": None if self.last_claim is None else round(now - self.last_claim, 3),
            "last_loss": None if self.last_loss is None else round(now - self.last_loss, 3),
            "unproven_seconds": {h: round(now - u.since, 3) for h, u in self._undead.items()},
        }

    def record_deferral(self, handle: str) -> None:
        """Record that a delivery of ``handle`` was deferred and its consumer paused (FL-73, FL-81).

        The seat counts as quiesced until the next successful renew, whose resume edge calls
        ``on_resume`` to restart the consumer; without the record a seat could end up owned,
        attached and deaf. A seat not held is a no-op.
        """
        seat = self._held.get(handle)
        if seat is not None and not seat.quiesced:
            seat.quiesced = True
            _log.info("seat_deferral_recorded", seat=handle, epoch=seat.grant.epoch)

    # -- claim -------------------------------------------------------------------------------

    async def claim(self, handle: str) -> int | None:
        """Claim one seat and run the acquire hook (FL-50, FL-55, FL-65).

        Returns:
            The epoch when this node holds the seat after the call (already held: its epoch);
            None when another owner holds it, the seat is undead here, it is backing off after a
            failed acquire, or the acquire hook failed.

        Raises:
            CoordinationUnavailable: unknown (including :class:`LeaseContention`); retry later.
        """
        seat = self._held.get(handle)
        if seat is not None:
            return seat.grant.epoch
        if handle in self._undead or self._backoff.get(handle, 0.0) > self._clock():
            return None
        async with self._lock(handle):
            seat = self._held.get(handle)
            if seat is not None:
                return seat.grant.epoch
            grant = await self._leases.acquire(handle)
            if grant is None:
                return None
            seat = self._held[handle] = HeldSeat(grant)
            self.last_claim = self._clock()
        _log.info("seat_claimed", seat=handle, epoch=grant.epoch)
        try:
            await self._on_acquire(handle, grant.epoch)
        except Exception as e:  # noqa: BLE001 - any hook failure is an acquire failure (FL-55)
            _log.error(
                "seat_acquire_failed", seat=handle, epoch=grant.epoch, error=f"{type(e).__name__}: {e}"
            )
            self._backoff[handle] = self._clock() + self._ttl
            await self.release(handle, "acquire_failed")
            return None
        if self._held.get(handle) is not seat:  # lost while the hook ran: tear down what it built
            await self._teardown(handle, grant.epoch, "lease_lost")
            return None
        seat.ready = True
        return grant.epoch

    # -- renew -------------------------------------------------------------------------------

    async def renew_all(self) -> dict[str, bool | None]:
        """Renew every held seat once, concurrently, and act on each outcome (FL-53, FL-73).

        Also renews undead seats' leases and retries their teardown (FL-68).

        Returns:
            handle → True (renewed), False (lost: released fenced), None (unknown: kept, quiesced;
            released fenced when a full TTL has passed since the last good renew).
        """
        handles = list(self._held)
        results = await asyncio.gather(*(self._renew(h) for h in handles))
        await tend_undead(
            self._undead,
            leases=self._leases,
            on_release=self._on_release,
            give_up=self._give_up,
            clock=self._clock,
        )
        return dict(zip(handles, results, strict=True))

    async def _renew(self, handle: str) -> bool | None:
        seat = self._held.get(handle)
        if seat is None:
            return None
        error = ""
        async with self._lock(handle):
            if self._held.get(handle) is not seat:
                return None
            try:
                grant = await self._leases.renew(seat.grant)
                outcome: bool | None = grant is not None
            except CoordinationUnavailable as e:
                grant, outcome = None, None
                error = str(e)
            if grant is not None:
                seat.grant = grant
        epoch = seat.grant.epoch
        if outcome is True:
            # sent_wall: when the compare-and-set was sent (wall clock). A process frozen between send
            # and reply logs the renew late; the write itself landed before any successor's claim
            _log.debug(
                "seat_renewed",
                seat=handle,
                epoch=epoch,
                revision=seat.grant.revision,
                sent_wall=time.time() - (self._clock() - seat.grant.sent_at),
            )
            if seat.quiesced:
                seat.quiesced = False
                _log.info("seat_resumed", seat=handle, epoch=epoch)
                await self._hook(self._on_resume, handle, epoch)
            return True
        if outcome is False:
            await self._lose(handle, seat, "lease_lost")
            return False
        if not seat.quiesced:
            seat.quiesced = True
            _log.warning("seat_renew_unknown", seat=handle, epoch=epoch, error=error)
            await self._hook(self._on_quiesce, handle)
        if self._clock() - seat.grant.sent_at >= self._ttl:
            await self._lose(
                handle, seat, "lease_lost", detail="no successful renew for a full TTL", delete=True
            )
        return None

    async def _lose(
        self, handle: str, seat: HeldSeat, reason: str, *, detail: str = "", delete: bool = False
    ) -> None:
        if self._held.get(handle) is not seat:
            return
        del self._held[handle]
        self.last_loss = self._clock()
        _log.warning("seat_lost", seat=handle, epoch=seat.grant.epoch, reason=reason, detail=detail or None)
        await self._teardown(handle, seat.grant.epoch, reason)
        if delete:  # our clock says it lapsed; the store may still hold it for a moment
            with contextlib.suppress(CoordinationUnavailable):
                await self._leases.release(seat.grant)

    async def _teardown(self, handle: str, epoch: int, reason: str) -> None:
        try:
            await self._on_release(handle, reason)
        except Exception as e:  # noqa: BLE001 - the lease is gone; nothing to keep renewing
            _log.error(
                "seat_release_hook_failed",
                seat=handle,
                epoch=epoch,
                reason=reason,
                error=f"{type(e).__name__}: {e}",
            )

    async def _hook(self, hook: Callable[..., Awaitable[None]], *args: Any) -> None:
        try:
            await hook(*args)
        except Exception as e:  # noqa: BLE001 - a hook failure must not stop the heartbeat
            _log.error(
                "seat_hook_failed",
                hook=getattr(hook, "__name__", "hook"),
                args=list(args),
                error=f"{type(e).__name__}: {e}",
            )

    # -- release -----------------------------------------------------------------------------

    async def release(self, handle: str, reason: ReleaseReason) -> None:
        """Give up one seat (FL-66, FL-68).

        Voluntary reasons (``drain``, ``rebalance``, ``role_gone``, ``placement``) keep the fence
        valid while ``on_release`` lets the running handler finish, then delete the lease. Fenced
        reasons (``lease_lost``, ``acquire_failed``, ``posture``) trip the fence first, so the
        hook's acks and NAKs are refused and the in-flight delivery stays unacked. Either way the
        lease is deleted only at the held revision, and never the epoch counter (FL-49). If the
        hook raises, the seat becomes undead (FL-68). Logs ``seat_released`` with seat, epoch and
        reason. A seat not held is a no-op.
        """
        seat = self._held.get(handle)
        if seat is None:
            return
        fenced = reason in FENCED_REASONS
        if fenced:
            del self._held[handle]
        else:
            seat.releasing = True
        try:
            await self._on_release(handle, reason)
        except Exception as e:  # noqa: BLE001 - teardown unproven: keep the lease (FL-68)
            if self._held.get(handle) is seat:
                del self._held[handle]
            self._undead[handle] = Undead(seat.grant, reason, self._clock())
            _log.error(
                "seat_teardown_unproven",
                seat=handle,
                epoch=seat.grant.epoch,
                reason=reason,
                unproven_seconds=0.0,
                error=f"{type(e).__name__}: {e}",
            )
            return
        if not fenced:
            if self._held.get(handle) is not seat:
                return  # lost while the hook ran; the renew path already logged it
            del self._held[handle]
        await self._give_up(handle, seat.grant, reason)
        if not fenced:
            await self._hook(self._on_released, handle, reason)

    def nudge(self) -> None:
        """Run the next placement sweep now (a peer released a seat); it spends the same claim budget."""
        self._nudged.set()

    async def _give_up(self, handle: str, grant: Grant, reason: str) -> None:
        released = True
        async with self._lock(handle):
            try:
                released = await self._leases.release(grant)  # False: lapsed or taken, nothing handed back
            except CoordinationUnavailable as e:  # it lapses at the TTL on its own
                _log.warning("seat_release_unknown", seat=handle, epoch=grant.epoch, error=str(e))
        event = "seat_released" if released else "seat_release_lapsed"
        _log.info(event, seat=handle, epoch=grant.epoch, reason=reason)

    # -- placement ---------------------------------------------------------------------------

    def assign(self, seats: Sequence[str]) -> None:
        """Set the agent seats this node may run (org-derived, in org order); the next sweep acts."""
        self._seats = list(dict.fromkeys(seats))

    async def sweep(self) -> dict[str, int | None]:
        """One placement pass: release seats no longer assigned (``role_gone``), then the policy's.

        Returns:
            handle → epoch (or None) for every claim attempted; an unknown claim is logged
            ``seat_claim_unknown`` and reads None.
        """
        assigned = set(self._seats)
        for handle in [h for h in self._held if h not in assigned]:
            await self.release(handle, "role_gone")
        plan = await self._policy.plan(list(self._seats), self.held())
        for handle, reason in plan.release.items():
            await self.release(handle, reason)
        todo = [h for h in plan.claim if h in assigned and h not in self._held]
        results = await asyncio.gather(*(self._try_claim(h) for h in todo))
        return dict(zip(todo, results, strict=True))

    async def _try_claim(self, handle: str) -> int | None:
        try:
            return await self.claim(handle)
        except CoordinationUnavailable as e:
            _log.warning("seat_claim_unknown", seat=handle, error=str(e))
            return None

    # -- loops -------------------------------------------------------------------------------

    def renew_lead(self, costs: Sequence[float]) -> float:
        """How early (seconds) a heartbeat starts before admission's window closes: :func:`renew_lead`."""
        return renew_lead(self._hb, costs)

    def start(self) -> None:
        """Start the heartbeat (every TTL/3, FL-52) and placement sweep (FL-56) loops."""
        if not self._tasks:
            self._stopping = False
            beat = heartbeat_loop(self.renew_all, heartbeat=self._hb, clock=self._clock)
            sweep = sweep_loop(
                self.sweep,
                nudged=self._nudged,
                interval=self._sweep_interval,
                stopping=lambda: self._stopping,
            )
            self._tasks = [
                asyncio.create_task(beat, name="seat-heartbeat"),
                asyncio.create_task(sweep, name="seat-sweep"),
            ]

    async def stop(self, *, reason: ReleaseReason = "drain") -> None:
        """Stop the loops and release every held seat (voluntary for ``drain``), concurrently.

        Undead seats are left to lapse at the TTL: only a restart frees them (FL-68).

        Order matters (FL-65, FL-129): the placement sweep stops first (no new claims); the
        heartbeat keeps renewing while the voluntary releases wait for their running turns —
        otherwise a drained turn would trip its in-turn fence one heartbeat later and its NAK
        would be fenced after a TTL — and stops only once every seat is released.
        """
        tasks, self._tasks = self._tasks, []
        self._stopping = True
        self._nudged.set()
        heartbeat = [t for t in tasks if t.get_name() == "seat-heartbeat"]
        others = [t for t in tasks if t not in heartbeat]
        for task in others:
            task.cancel()
        for task in others:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        try:
            await asyncio.gather(*(self.release(h, reason) for h in list(self._held)))
        finally:
            for task in heartbeat:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
