"""The reconciler: every node converges on the fleet's activation epoch (FL-106..FL-116).

A control loop in the Kubernetes habit — observe, diff, act, report every tick, never trust an
event alone (STYLE.md; nolar/kopf's peering loop):

- **observe**: read the pointer's epoch (a cheap peek; the body is opened only when it moved);
- **act**: when it differs from the epoch this node applied and this epoch's retry budget is not
  spent (FL-111: 3 attempts), open the body (FL-107) and hand it to the node's ``apply`` callback;
- **report**: stamp ``crewlet_status`` (FL-110), publish ``config_revision_applied`` for every
  attempt (FL-114), and evaluate the posture (FL-111), telling the node when it changes.

Ticks run every reconcile interval (TTL/3: 15 s by default) with ±20 % jitter on the interval,
never on the apply (FL-108). :meth:`Reconciler.nudge` (the ``crewlet.config.revision_activated``
broadcast) wakes the loop at once; the following poll still waits one whole jittered interval. The
reconciler skips on the epoch it applied, never on payload bytes (FL-115): re-activating an
unchanged revision is a new epoch and a new apply, which re-reads the secret store.

What it does not guarantee: an apply is not transactional across subsystems. Everything that can
fail is checked before the epoch swap (status ``error``, previous epoch intact); what runs after
the swap is ordered to be idempotent, and a failure there is reported ``degraded``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from shared import logs
from shared.coordination import Coordination, CoordinationUnavailable

from ._errors import ControlUnavailable, PayloadUnopenable, RevisionAdvanced
from ._local import LocalRecord
from ._posture import Posture, PostureTracker, posture
from ._records import Activation, Revision
from ._status import NodeStatus, cut_text, read_statuses, write_status
from ._store import ControlStore

__all__ = ["EVENT_ERROR_LIMIT", "REVISION_ACTIVATED_SUBJECT", "ApplyOutcome", "Reconciler"]

_log = logs.get("control")

REVISION_ACTIVATED_SUBJECT = "crewlet.config.revision_activated"
"""Core NATS subject of the activation nudge: an ephemeral broadcast, never a consumer group (FL-108)."""
EVENT_ERROR_LIMIT = 64 * 1024
"""Bytes of error text a ``config_revision_applied`` event carries, marked when cut (FL-114)."""
JITTER = 0.2
"""The poll interval's jitter, ± this fraction (FL-108)."""


@dataclass
class ApplyOutcome:
    """What one apply attempt did (FL-111, FL-114).

    Attributes:
        status: ``ok``, ``error`` (refused before anything was mutated) or ``degraded`` (failed
            after the epoch swap).
        error: The failure, ``path: message`` lines for a refused document.
        applied_subsystems: The stages done, in order; None when the apply never started (body
            missing, unreadable or unopenable).
    """

    status: str
    error: str = ""
    applied_subsystems: list[str] | None = field(default_factory=list)


ApplyFn = Callable[[Activation], Awaitable[ApplyOutcome]]
PostureFn = Callable[[Posture, Posture], Awaitable[None]]
EventFn = Callable[[dict[str, Any]], None]


class Reconciler:
    """One node's control loop (FL-106..FL-116).

    Args:
        store: The fleet's revisions and pointer.
        coord: The coordination store (the ``status`` slot).
        node_id: This node.
        apply: ``await apply(activation) -> ApplyOutcome``: build and swap in the company.
        interval: The reconcile interval in seconds (TTL/3).
        on_posture: ``await on_posture(new, old)`` when the posture changes.
        on_event: Called with each ``config_revision_applied`` event (FL-114).
        local: This node's own record of what it served (FL-109), or None on a scratch node.

    Attributes:
        applied: The epoch applied (0: none); ``applied_revision`` its revision id.
        posture: The current posture.
    """

    def __init__(
        self,
        store: ControlStore,
        coord: Coordination,
        *,
        node_id: str,
        apply: ApplyFn,
        interval: float,
        on_posture: PostureFn | None = None,
        on_event: EventFn | None = None,
        local: LocalRecord | None = None,
    ) -> None:
        self.store = store
        self.coord = coord
        self.node_id = node_id
        self._apply = apply
        self.interval = interval
        self._on_posture = on_posture
        self._on_event = on_event
        self.local = local
        self.applied = 0
        self.applied_revision = ""
        self.target = 0
        self.status = "none"
        self.error = ""
        self.posture: Posture = "wait"
        self.tracker = PostureTracker()
        self._wake = asyncio.Event()
        self._applied_cv = asyncio.Condition()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    # -- boot (FL-109) -----------------------------------------------------------------------

    async def boot(self, *, seed: Revision | None = None, force: Revision | None = None) -> None:
        """Settle what the fleet runs at this node's start, then apply it once (FL-109, CO-4).

        - ``force`` (``--import-company``): stored and activated whatever the pointer says.
        - The fleet has no pointer: this node publishes what it served before (its local
          record), else its seed (``--company``); several nodes booting together race with a
          compare-and-set and all converge on the winner.
        - The fleet has a pointer: an offline import newer than it (FL-109) is published; a seed
          that differs from it is ignored, logged ``company_seed_ignored``.

        Raises:
            ControlUnavailable: the store did not answer (the boot cannot tell what to run).
        """
        try:
            epoch, current_id, current_at = await self.store.epoch()
        except PayloadUnopenable as e:  # the tick reports it (status error, FL-107)
            _log.warning("config_pointer_unreadable", error=str(e))
            await self.tick()
            return
        local = self.local.read() if self.local is not None else None
        if force is not None:
            await self.store.store(force)
            await self.store.activate(force, by=self.node_id)
            _log.info("company_import_forced", revision_id=force.revision_id)
        elif epoch == 0:
            candidate = local.revision if local is not None else seed
            if candidate is not None:
                await self.store.store(candidate)
                try:
                    act = await self.store.activate(candidate, by=self.node_id, expected_epoch=0)
                    _log.info(
                        "config_pointer_published",
                        revision_id=candidate.revision_id,
                        epoch=act.epoch,
                        origin="local" if local is not None else "seed",
                    )
                except RevisionAdvanced as e:
                    _log.info("config_pointer_found", revision_id=e.active_revision_id)
        elif local is not None and local.pending and local.activated_at > current_at:
            await self.store.store(local.revision)
            try:
                await self.store.activate(local.revision, by=self.node_id, expected_epoch=epoch)
                _log.info("config_offline_import_published", revision_id=local.revision.revision_id)
            except RevisionAdvanced:
                _log.info("config_offline_import_superseded", revision_id=local.revision.revision_id)
        elif seed is not None and seed.revision_id != current_id:
            current = await self._digest_of(current_id)
            if current != seed.digest:
                _log.warning(
                    "company_seed_ignored",
                    revision_id=current_id,
                    detail="the fleet already runs a revision: the --company file is a seed; "
                    "use `crewlet config import` (or --import-company) to change the company",
                )
        await self.tick()

    async def _digest_of(self, revision_id: str) -> str:
        try:
            return (await self.store.get(revision_id)).digest
        except Exception:  # noqa: BLE001 - only for a warning
            return ""

    # -- the loop ----------------------------------------------------------------------------

    def nudge(self) -> None:
        """Wake the loop now (the ``revision_activated`` broadcast, FL-108)."""
        self._wake.set()

    def start(self) -> None:
        """Start the loop (after :meth:`boot`)."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="config-reconciler")

    async def stop(self) -> None:
        """Stop the loop; an apply in progress finishes first.

        The loop is asked to end (a flag and a wake) rather than cancelled: on Python 3.11 a
        cancellation that meets a completing ``asyncio.wait_for`` can be swallowed, leaving the loop
        running and the drain waiting for it for good.
        """
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), 30.0)
        except TimeoutError:  # an apply that never returns: cancel it after all
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        next_poll = asyncio.get_running_loop().time() + self._jittered()
        while not self._stopping:
            timeout = max(0.0, next_poll - asyncio.get_running_loop().time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            if self._stopping:
                return
            nudged = self._wake.is_set()
            self._wake.clear()
            try:
                await self.tick()
            except Exception as e:  # noqa: BLE001 - the loop must outlive any one tick
                _log.error("config_reconcile_failed", error=f"{type(e).__name__}: {e}")
            if not nudged:  # a nudge does not shorten the next poll's whole interval (FL-108)
                next_poll = asyncio.get_running_loop().time() + self._jittered()

    def _jittered(self) -> float:
        return self.interval * random.uniform(1 - JITTER, 1 + JITTER)

    async def wait_applied(self, epoch: int, timeout: float) -> bool:
        """Wait until this node applied ``epoch`` (or a later one); False after ``timeout`` seconds."""

        async def reached() -> None:
            async with self._applied_cv:
                await self._applied_cv.wait_for(lambda: self.applied >= epoch)

        try:
            await asyncio.wait_for(reached(), timeout)
        except TimeoutError:
            return False
        return True

    # -- one tick ----------------------------------------------------------------------------

    async def tick(self) -> None:
        """Observe, act, report once (see the module docstring)."""
        async with self._lock:
            await self._tick()

    async def _tick(self) -> None:
        unopenable = ""
        try:
            target, revision_id, _ = await self.store.epoch()
        except PayloadUnopenable as e:
            target, revision_id, unopenable = self.target, "", str(e)
        except ControlUnavailable as e:
            _log.warning("config_poll_unknown", error=str(e))
            return
        self.target = target
        self.tracker.retarget(target)
        if unopenable:
            self._failed(unopenable)
        elif target and target != self.applied and self.tracker.may_attempt():
            self.tracker.attempts += 1
            await self._attempt(target, revision_id)
        self.tracker.tick(self.applied)
        await self._report()

    async def _attempt(self, target: int, revision_id: str) -> None:
        try:
            act = await self.store.pointer()
        except PayloadUnopenable as e:
            self._failed(str(e))
            self._event(revision_id, ApplyOutcome("error", str(e), None))
            return
        except ControlUnavailable as e:
            self.tracker.attempts -= 1  # unknown is not an attempt: ask again next tick
            _log.warning("config_poll_unknown", error=str(e))
            return
        if act is None:
            return
        try:
            outcome = await self._apply(act)
        except Exception as e:  # noqa: BLE001 - an apply that raised is an error outcome
            outcome = ApplyOutcome("error", f"{type(e).__name__}: {e}", ["secrets"])
        self._event(act.revision.revision_id, outcome)
        if outcome.status == "ok":
            async with self._applied_cv:
                self.applied, self.applied_revision = act.epoch, act.revision.revision_id
                self.status, self.error = "ok", ""
                self._applied_cv.notify_all()
            if self.local is not None:
                self.local.write(act.revision, epoch=act.epoch, activated_at=act.activated_at)
            _log.info(
                "config_revision_applied",
                revision_id=act.revision.revision_id,
                epoch=act.epoch,
                status="ok",
                applied_subsystems=outcome.applied_subsystems,
            )
        else:
            self._failed(outcome.error, status=outcome.status)
            if outcome.status == "degraded":  # the swap happened: this epoch runs, unconverged
                async with self._applied_cv:
                    self.applied, self.applied_revision = act.epoch, act.revision.revision_id
                    self._applied_cv.notify_all()

    def _failed(self, error: str, *, status: str = "error") -> None:
        self.tracker.failed = True
        self.tracker.error = error
        self.status, self.error = status, error
        _log.warning(
            "config_apply_failed",
            epoch=self.target,
            status=status,
            attempts=self.tracker.attempts,
            error=cut_text(error, 2000)[0],
        )

    def _event(self, revision_id: str, outcome: ApplyOutcome) -> None:
        error, cut = cut_text(outcome.error, EVENT_ERROR_LIMIT)
        data: dict[str, Any] = {"revision_id": revision_id, "status": outcome.status, "epoch": self.target}
        if outcome.error:
            data["error"] = error
            if cut:
                data["error_truncated"] = True
        if outcome.applied_subsystems is not None:
            data["applied_subsystems"] = list(outcome.applied_subsystems)
        if self._on_event is not None:
            try:
                self._on_event(data)
            except Exception as e:  # noqa: BLE001 - reporting never fails the apply
                _log.warning("config_event_failed", error=f"{type(e).__name__}: {e}")

    async def _report(self) -> None:
        peers: dict[str, NodeStatus] = {}
        try:
            peers = {n: s for n, s in (await read_statuses(self.coord)).items() if n != self.node_id}
        except CoordinationUnavailable as e:
            _log.warning("config_status_unknown", error=str(e))
        new = posture(
            applied=self.applied,
            target=self.target,
            failed=self.tracker.failed,
            ticks_behind=self.tracker.ticks_behind,
            peer_applied=any(s.applied_epoch >= self.target and s.status == "ok" for s in peers.values()),
            peers_reported=bool(peers),
            attempts=self.tracker.attempts,
        )
        old, self.posture = self.posture, new
        if new != old:
            _log.warning(
                "config_posture_changed",
                posture=new,
                previous=old,
                applied_epoch=self.applied,
                target_epoch=self.target,
                attempts=self.tracker.attempts,
            )
            if self._on_posture is not None:
                try:
                    await self._on_posture(new, old)
                except Exception as e:  # noqa: BLE001
                    _log.error("config_posture_hook_failed", error=f"{type(e).__name__}: {e}")
        status = NodeStatus(
            node=self.node_id,
            applied_epoch=self.applied,
            revision_id=self.applied_revision,
            status=self.status,  # type: ignore[arg-type]
            error=self.error,
            target_epoch=self.target,
            posture=new,
        )
        try:
            await write_status(self.coord, status)
        except CoordinationUnavailable as e:
            _log.warning("config_status_unknown", error=str(e))
