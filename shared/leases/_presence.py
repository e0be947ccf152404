"""The presence lease ``node:{id}`` (FL-42..FL-47).

Every node holds its presence lease in the ``leases`` bucket, whose age is the lease TTL: a
renewal is a compare-and-set write, which restarts the key's age; a node that stops renewing
disappears from every peer's view within one TTL (FL-36: the broker's clock decides). Renewals run
every TTL/3. A draining node releases presence last (FL-47).

Ownership is decided from the write's reply, never from a read (DESIGN.md). When the key is held
by another owner at boot — the previous incarnation of this node, killed within the last TTL, or
a second process started under the same id — this node takes it over by compare-and-set and logs
``node_presence_taken_over`` naming the previous owner. If a renewal then finds another owner, two
live processes share the id: ``node_id_conflict`` is logged on every such heartbeat so the
operator sees it (the spec's duplicate-id failure: both undercount the fleet).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from shared import logs
from shared.coordination import Coordination, CoordinationUnavailable, RevisionConflict

from ._records import LeaseRecord, key_of

__all__ = ["Presence"]

_log = logs.get("coord.presence")


class Presence:
    """This node's presence lease.

    Args:
        coord: The coordination store.
        node_id: This node's id.
        owner: This incarnation's owner string (FL-10).
        protocol: This build's lease protocol.
        ttl: The lease TTL; renewals every ``ttl / 3``.
        meta: Called at each renewal for the presence meta (roles, labels, broker kind, posture...).
    """

    def __init__(
        self,
        coord: Coordination,
        *,
        node_id: str,
        owner: str,
        protocol: int,
        ttl: timedelta,
        meta: Callable[[], dict[str, Any]],
    ) -> None:
        self._coord = coord
        self._key = key_of(f"node:{node_id}")
        self._node = node_id
        self._owner = owner
        self._protocol = protocol
        self._ttl = ttl
        self._meta = meta
        self._revision = 0
        self._task: asyncio.Task[None] | None = None
        self.held = False

    def _record(self) -> bytes:
        return LeaseRecord(
            f"node:{self._node}", self._owner, self._node, 0, self._protocol, self._meta()
        ).encode()

    async def claim(self) -> bool:
        """Claim (or take over) the presence key once.

        Returns:
            True when this incarnation holds it after the call.

        Raises:
            CoordinationUnavailable: the store could not be asked (the caller retries).
        """
        entry = await self._coord.get("leases", self._key)
        try:
            if entry is None:
                self._revision = await self._coord.create("leases", self._key, self._record())
            else:
                prev = LeaseRecord.decode(self._key, entry.value)
                self._revision = await self._coord.update(
                    "leases", self._key, self._record(), revision=entry.revision
                )
                if prev.owner != self._owner:
                    _log.warning("node_presence_taken_over", previous_owner=prev.owner, owner=self._owner)
        except RevisionConflict:
            self.held = False
            return False
        self.held = True
        return True

    async def renew(self) -> bool:
        """Renew once by compare-and-set at the last revision; on a lost race, take over again.

        Returns:
            True when held after the call.

        Raises:
            CoordinationUnavailable: unknown; the lease is kept as believed until the next beat.
        """
        if not self.held:
            return await self.claim()
        try:
            self._revision = await self._coord.update(
                "leases", self._key, self._record(), revision=self._revision
            )
            return True
        except RevisionConflict:
            entry = await self._coord.get("leases", self._key)
            if entry is not None:
                other = LeaseRecord.decode(self._key, entry.value)
                if other.owner != self._owner:
                    _log.error(
                        "node_id_conflict",
                        other_owner=other.owner,
                        owner=self._owner,
                        detail="two live processes share this node id; give each a distinct node.id",
                    )
            self.held = False
            return await self.claim()

    async def _loop(self) -> None:
        interval = self._ttl.total_seconds() / 3
        while True:
            await asyncio.sleep(interval)
            try:
                await self.renew()
            except CoordinationUnavailable as e:
                _log.warning("presence_renew_unknown", error=str(e))

    async def start(self, *, budget: float = 30.0) -> None:
        """Claim presence (retrying while the store is unavailable, up to ``budget`` s) and start renewing."""
        deadline = asyncio.get_running_loop().time() + budget
        while True:
            try:
                await self.claim()
                break
            except CoordinationUnavailable:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.5)
        self._task = asyncio.create_task(self._loop(), name="presence-renew")

    async def release(self) -> None:
        """Stop renewing and delete the key if this incarnation still holds it (FL-47: last on drain)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.held:
            with contextlib.suppress(RevisionConflict, CoordinationUnavailable):
                await self._coord.delete("leases", self._key, revision=self._revision)
            self.held = False


async def live_data_nodes(coord: Coordination) -> list[str]:
    """The ids of the nodes whose live presence lease names role ``data``, sorted (FL-139, ES-47).

    Stateless nodes never count as a copy of the estate: the router, the trim, the eviction gate and
    the search division all take the role from presence (FL-144). Unreadable rows are skipped.

    Raises:
        CoordinationUnavailable: the lease bucket could not be read.
    """
    nodes = set()
    for e in await coord.entries("leases", "node."):
        try:
            rec = LeaseRecord.decode(e.key, e.value)
        except ValueError:
            continue
        if "data" in rec.roles:
            nodes.add(rec.node or e.key[5:])
    return sorted(nodes)
