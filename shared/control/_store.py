"""The fleet's revision history and activation pointer on the coordination KV (FL-104..FL-107).

:class:`ControlStore` is the only code that reads or writes the ``config`` and ``revisions`` slots.
Every write is a compare-and-set; the answers are yes, no (:class:`RevisionAdvanced`) or unknown
(:class:`ControlUnavailable`, FL-32).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

from shared import logs
from shared.coordination import (
    Coordination,
    CoordinationBusy,
    CoordinationUnavailable,
    OutcomeUnknown,
    RevisionConflict,
)

from ._errors import ControlUnavailable, PayloadUnopenable, RevisionAdvanced, UnknownRevision
from ._records import ACTIVATION_KEY, Activation, Revision, Sealer

__all__ = ["BUSY_RETRIES", "ControlStore"]

BUSY_RETRIES = 6
"""How often :meth:`ControlStore.store` repeats a create refused as busy (10164) before it reports
unknown; 50–100 ms apart at first, doubling (3–6 s in all)."""

_log = logs.get("control")


class ControlStore:
    """Revisions and the activation pointer of one company (FL-104..FL-107).

    Args:
        coord: The coordination store (slots ``config`` and ``revisions``).
        sealer: The Tier A keyring; bodies are sealed with it and opened with it (FL-107).
        clock_ms: Wall clock in milliseconds (tests pass a skewed one, FL-105).
    """

    def __init__(
        self, coord: Coordination, sealer: Sealer, *, clock_ms: Callable[[], int] | None = None
    ) -> None:
        self.coord = coord
        self.sealer = sealer
        self._clock_ms: Callable[[], int] = clock_ms or (lambda: int(time.time() * 1000))

    # -- history -----------------------------------------------------------------------------

    async def store(self, revision: Revision) -> None:
        """Keep ``revision`` in history (idempotent for a seed's content-derived id).

        A create refused as busy (server code 10164: another writer's proposal on the same key is
        uncommitted — several nodes booting together write one content-derived seed id) is repeated
        up to :data:`BUSY_RETRIES` times: nothing of it landed, and repeating an idempotent create
        either lands or meets the other writer's copy (FL-109).

        Raises:
            ControlUnavailable: the store did not answer (the write may have landed).
        """
        payload = revision.encode(self.sealer)
        delay = 0.05
        for attempt in range(BUSY_RETRIES + 1):
            try:
                await self.coord.create("revisions", revision.revision_id, payload)
                return
            except RevisionConflict:
                return  # already kept: ids are unique, or content-derived for seeds
            except CoordinationBusy as e:
                if attempt == BUSY_RETRIES:
                    raise ControlUnavailable(
                        f"revision {revision.revision_id} may not be stored: {e}"
                    ) from None
                await asyncio.sleep(delay * (1 + random.random()))
                delay *= 2
            except CoordinationUnavailable as e:
                raise ControlUnavailable(f"revision {revision.revision_id} may not be stored: {e}") from None

    async def get(self, revision_id: str) -> Revision:
        """Return one revision with its document.

        Raises:
            UnknownRevision: no such id.
            PayloadUnopenable: its body does not open on this node.
            ControlUnavailable: the store did not answer.
        """
        try:
            entry = await self.coord.get("revisions", revision_id)
        except CoordinationUnavailable as e:
            raise ControlUnavailable(str(e)) from None
        if entry is None:
            raise UnknownRevision(revision_id)
        try:
            return Revision.decode(entry.value, self.sealer)
        except ValueError:
            raise UnknownRevision(revision_id) from None

    async def history(self) -> list[Revision]:
        """Every revision's meta (documents left empty), newest first.

        Raises:
            ControlUnavailable: the store did not answer.
        """
        try:
            entries = await self.coord.entries("revisions")
        except CoordinationUnavailable as e:
            raise ControlUnavailable(str(e)) from None
        out: list[tuple[int, Revision]] = []
        for entry in entries:
            try:
                out.append((entry.revision, Revision.decode(entry.value, None)))
            except ValueError:
                _log.warning("config_revision_unreadable", key=entry.key)
        return [r for _, r in sorted(out, key=lambda x: (x[1].created_at, x[0]), reverse=True)]

    # -- the pointer -------------------------------------------------------------------------

    async def pointer(self) -> Activation | None:
        """The fleet's activation pointer with its opened body, or None when the fleet has none.

        Raises:
            PayloadUnopenable: the pointer's body is unsealed or does not open here (FL-107).
            ControlUnavailable: the store did not answer.
        """
        try:
            entry = await self.coord.get("config", ACTIVATION_KEY)
        except CoordinationUnavailable as e:
            raise ControlUnavailable(str(e)) from None
        if entry is None:
            return None
        return Activation.decode(entry.value, entry.revision, self.sealer)

    async def epoch(self) -> tuple[int, str, int]:
        """``(epoch, revision_id, activated_at ms)`` of the pointer without opening it; ``(0, "", 0)`` when none.

        The reconciler's cheap poll: the body is opened only when the epoch moved.

        Raises:
            ControlUnavailable: the store did not answer.
        """
        try:
            entry = await self.coord.get("config", ACTIVATION_KEY)
        except CoordinationUnavailable as e:
            raise ControlUnavailable(str(e)) from None
        if entry is None:
            return 0, "", 0
        try:
            revision_id, at = Activation.peek(entry.value)
        except ValueError:
            raise PayloadUnopenable("the activation pointer is not an activation record") from None
        return entry.revision, revision_id, at

    async def activate(
        self,
        revision: Revision,
        *,
        by: str,
        expected_epoch: int | None = None,
        activated_at: int | None = None,
    ) -> Activation:
        """Move the pointer to ``revision`` (FL-104, FL-105): one compare-and-set write.

        Args:
            revision: A revision already in history (:meth:`store`).
            by: Who activates (token id or node id), kept on the record.
            expected_epoch: Only if the pointer is still at this epoch (0: only if the fleet has
                none). None: activate whatever is current, retrying the CAS on a race (even an
                unconditional activation is a CAS, FL-105).
            activated_at: The instant to claim (ms); default now. Raised to the pointer's + 1 ms
                when not later (FL-105: instants strictly rise across nodes whose clocks differ).

        Returns:
            The activation as written: its epoch and instant.

        Raises:
            RevisionAdvanced: ``expected_epoch`` was given and the pointer is elsewhere (FL-106).
            ControlUnavailable: the store did not answer; re-read the pointer to learn the outcome.

        A compare-and-set refused as busy (10164, nodes booting together) is re-read and tried
        again within the 20 attempts, as a lost race is.
        """
        for _ in range(20):
            try:
                entry = await self.coord.get("config", ACTIVATION_KEY)
            except CoordinationUnavailable as e:
                raise ControlUnavailable(str(e)) from None
            current_epoch = entry.revision if entry is not None else 0
            current_at = 0
            current_id = ""
            if entry is not None:
                try:
                    current_id, current_at = Activation.peek(entry.value)
                except ValueError:
                    current_id = "(unreadable)"
            if expected_epoch is not None and current_epoch != expected_epoch:
                raise RevisionAdvanced(revision.revision_id, current_id or "(none)")
            at = activated_at if activated_at is not None else self._clock_ms()
            at = max(int(at), current_at + 1)
            value = Activation.encode(revision, self.sealer, activated_at=at, activated_by=by)
            try:
                epoch = await self.coord.update("config", ACTIVATION_KEY, value, revision=current_epoch)
            except RevisionConflict:
                if expected_epoch is not None:
                    raise RevisionAdvanced(revision.revision_id, await self._current_id()) from None
                continue
            except CoordinationBusy:
                # another node's CAS on the pointer is uncommitted (10164): nothing of this one
                # landed; re-read and decide again (the pointer may have moved: RevisionAdvanced)
                await asyncio.sleep(0.05 * (1 + random.random()))
                continue
            except OutcomeUnknown as e:
                raise ControlUnavailable(
                    f"activation of {revision.revision_id}: outcome unknown: {e}"
                ) from None
            except CoordinationUnavailable as e:
                raise ControlUnavailable(str(e)) from None
            return Activation(revision=revision, epoch=epoch, activated_at=at, activated_by=by)
        raise ControlUnavailable("the activation pointer kept moving: 20 compare-and-set attempts lost")

    async def _current_id(self) -> str:
        try:
            _, revision_id, _ = await self.epoch()
        except (ControlUnavailable, PayloadUnopenable):
            return "(unknown)"
        return revision_id or "(none)"
