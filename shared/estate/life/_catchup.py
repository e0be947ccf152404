"""Catch-up by snapshot: a node below its log adopts a peer's (ES-56, ES-57, ES-58, ES-8).

**Donating** is :mod:`shared.estate._donor` (every data node answers offers and chunk requests;
the transfer and verification helpers live there too; they are re-exported here).

**Adopting** (:class:`CatchUp`): a copy whose checkpoint ``seq`` is below its log's first record
(``first_seq > seq + 1``: its next record was trimmed, ``below_floor``) cannot replay. It

1. puts a hold ``<domain>.join-<node>`` in the ``trim_holds`` slot per domain (pinning the trim
   where the log now starts) when a coordination is available, re-put every 30 s;
2. broadcasts an offer request and collects every answer for the offer window (5 s);
3. refuses, before any transfer, an artefact whose schema names a table/column this build lacks,
   whose per-log record version exceeds what it reads, at another generation, or whose position
   is itself below the log (``statelog_snapshot_refused``); prefers the highest positions;
4. fetches it in chunks into ``<snapshot_dir>/incoming-<sha16>.db.part``, verifies the sha256 and that
   the positions and schema read out of the file equal the manifest's (a mismatch logs
   ``statelog_snapshot_rejected``, deletes the file and asks the next donor);
5. stops the appliers, detaches the store (the process keeps its lock), replaces ``estate.db``
   (``-wal``/``-shm`` deleted), reopens it (schema upgrade), records the ledger watermark when the
   artefact carried no ledger (ES-8), restarts the appliers from the new checkpoint (consumers
   rebuilt with drift ``behind_checkpoint``), logs ``statelog_adopted`` (donor, sha256, taken_at)
   and releases the holds.

With no usable donor the copy stays out of service (``below_floor``) and asks again on an interval
doubling from 5 s to 5 minutes. The heartbeat finds a running copy below its log (or the applier
does, on a fetch) and the same adoption runs without a restart (ES-58). A failed install deletes
the fetched file and reopens the old one; when the live file cannot be reopened the node logs
``statelog_estate_lost`` (ERROR, naming the file), answers no reads (``estate_lost``) and retries the
reopen on every heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from shared import logs

from .._errors import Refused, StoreFailed
from .._tasks import stop_task
from ..log._applier import Applier
from ..log._log import StateLog
from ..store._schema import EstateModel
from ..store._store import EstateStore
from ._donor import (
    CHUNK,
    FETCH_PREFIX,
    OFFER_SUBJECT,
    OFFER_WINDOW,
    SnapshotDonor,
    ask_offers,
    fetch_artefact,
    verify_artefact,
)
from ._manifest import SnapshotFailed, incompatibility
from ._snapshot import SnapshotKeeper

__all__ = [
    "CHUNK",
    "FETCH_PREFIX",
    "OFFER_SUBJECT",
    "OFFER_WINDOW",
    "CatchUp",
    "SnapshotDonor",
    "ask_offers",
    "fetch_artefact",
    "verify_artefact",
]

_log = logs.get("statelog")

RETRY_FIRST, RETRY_MAX = 5.0, 300.0
"""The ask-again interval of a copy with no donor: 5 s doubling to 5 minutes (ES-57)."""
HOLD_REFRESH = 30.0
"""Seconds between re-puts of a join hold (the bucket forgets a hold after 3 minutes)."""


class CatchUp:
    """This node's below-the-log handling: adopt at boot, while running, and recover a lost file.

    Args:
        nc: The node's connection (None: no fleet to ask; a copy below its log stays out of service).
        node_id: This node's id.
        store: The estate file.
        log: The state logs (log heads).
        appliers: Domain → applier.
        snapshot_dir: Where fetched artefacts land (``store.snapshot_dir``).
        keeper: This node's snapshot keeper (its ``recent`` is invalidated by an adoption), or None.
        coord: A Coordination for the ``trim_holds`` slot, or None.
        offer_window: Seconds to collect offers (5).
        retry_first: First ask-again interval (5 s; doubles to ``retry_max``).
        retry_max: Longest ask-again interval (300 s).

    Attributes:
        lost: True while the live file could not be reopened (ES-58).
        adopted: The last adoption's ``{"donor", "sha256", "taken_at"}``, or None.
    """

    def __init__(
        self,
        *,
        nc: Client | None,
        node_id: str,
        store: EstateStore,
        log: StateLog,
        appliers: dict[str, Applier],
        snapshot_dir: Path,
        keeper: SnapshotKeeper | None = None,
        coord: Any = None,
        offer_window: float = OFFER_WINDOW,
        retry_first: float = RETRY_FIRST,
        retry_max: float = RETRY_MAX,
    ) -> None:
        self._nc = nc
        self.node_id = node_id
        self.store = store
        self.log = log
        self.appliers = appliers
        self.dir = snapshot_dir
        self.keeper = keeper
        self.coord = coord
        self.offer_window = offer_window
        self.retry_first = retry_first
        self.retry_max = retry_max
        self.lost = False
        self.adopted: dict[str, Any] | None = None
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._busy = asyncio.Lock()
        self._install_error = ""
        self._lost_error = ""

    # -- detection ----------------------------------------------------------------------------------

    async def below(self, heads: dict[str, tuple[int, int]] | None = None) -> dict[str, int]:
        """Domain → the log's first sequence, for every copy whose next record is gone from its log."""
        out: dict[str, int] = {}
        for domain, a in self.appliers.items():
            if a.compacted:  # a compacted log's vanished sequences were superseded (AG-1)
                continue
            if heads is not None and domain in heads:
                first = heads[domain][0]
            else:
                try:
                    first, _last = await self.log.head(domain)
                except Refused:
                    continue
            if first > a.applied + 1:
                out[domain] = first
        return out

    # -- boot and running -----------------------------------------------------------------------------

    async def boot(self) -> None:
        """At boot, before any applier starts: adopt if a copy is below its log (ES-57).

        Every applier's :attr:`~Applier.applied` is primed from the checkpoint. A copy still below
        after one attempt is marked ``below_floor`` (its applier is not started) and the ask-again
        loop runs.
        """
        for a in self.appliers.values():
            await a.prime()
        below = await self.below()
        if not below:
            return
        _log.warning("statelog_below_floor", node=self.node_id, first_seq=below, at="boot")
        if await self.adopt(below):
            return
        if self.lost:  # ES-58: at boot a failed install whose live file cannot be reopened stops the node
            raise StoreFailed(
                f"adopting a snapshot failed ({self._install_error}) and {self.store.path} could not be "
                f"reopened ({self._lost_error})"
            )
        for domain in await self.below():
            self.appliers[domain].refusing = "below_floor"
        self.trigger()

    def trigger(self) -> None:
        """Start the ask-again loop unless it runs (the heartbeat or an applier found a copy below)."""
        if self._stopping or self._nc is None:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._retry_loop(), name="estate-catchup")

    async def on_heads(self, heads: dict[str, tuple[int, int]]) -> None:
        """The heartbeat's hook: reopen a lost file; find a running copy below its log (ES-58)."""
        if self.lost:
            await self._recover_lost()
            return
        if self._busy.locked():
            return
        below = await self.below(heads)
        for domain in below:
            if self.appliers[domain].refusing in ("", "below_floor"):
                self.appliers[domain].refusing = "below_floor"
        if below or any(a.refusing == "below_floor" for a in self.appliers.values()):
            self.trigger()

    async def _retry_loop(self) -> None:
        delay = self.retry_first
        while not self._stopping and not self.lost:
            below = await self.below()
            if not below:
                await self._resume_unblocked()
                return
            if await self.adopt(below):
                return
            deadline = time.monotonic() + delay
            while not self._stopping and time.monotonic() < deadline:
                await asyncio.sleep(min(0.25, deadline - time.monotonic()))
            delay = min(delay * 2, self.retry_max)

    async def _resume_unblocked(self) -> None:
        for a in self.appliers.values():
            if a.refusing == "below_floor" and not a.running:
                a.refusing = ""
                await a.start()

    async def stop(self) -> None:
        """Stop asking; a join in progress gives up at once (before its install)."""
        self._stopping = True
        if self._task is not None:
            await stop_task(self._task, name="estate-catchup", grace=10.0)
            self._task = None

    # -- holds ----------------------------------------------------------------------------------------

    async def _hold(self, below: dict[str, int], *, release: bool = False) -> None:
        if self.coord is None:
            return
        for domain, a in self.appliers.items():
            if a.compacted:  # never trimmed (ES-69, AG-1): nothing to pin
                continue
            key = f"{domain}.join-{self.node_id}"
            try:
                if release:
                    await self.coord.delete("trim_holds", key)
                else:
                    first = below.get(domain, a.applied + 1)
                    rec = {
                        "domain": domain,
                        "kind": "join",
                        "node": self.node_id,
                        "seq": max(first - 1, a.applied),
                        "at": int(time.time() * 1_000_000),
                    }
                    await self.coord.put("trim_holds", key, json.dumps(rec).encode())
            except Exception as e:  # noqa: BLE001 - a hold is best effort: the fetch is verified anyway
                _log.warning("statelog_join_hold_failed", domain=domain, release=release, error=str(e))

    # -- adoption ---------------------------------------------------------------------------------------

    def _usable(self, offer: dict[str, Any], below: dict[str, int]) -> str:
        m = offer["manifest"]
        why = incompatibility(m)
        if why:
            return why
        for domain, first in below.items():
            seq = int(((m.get("positions") or {}).get(domain) or {}).get("seq", 0))
            if seq + 1 < first:
                return f"its {domain} position {seq} is itself below the log (first {first})"
        return ""

    async def adopt(self, below: dict[str, int]) -> bool:
        """Ask the fleet for a snapshot and install the first one that checks out (ES-56, ES-57).

        Returns:
            True when one was installed (appliers running again from its position); False when no
            donor offered a usable artefact, every fetch failed verification, or the node is stopping.
        """
        if self._nc is None or self._stopping:
            return False
        async with self._busy:
            await self._hold(below)
            refresher = asyncio.create_task(self._refresh_holds(below))
            try:
                return await self._adopt(below)
            finally:
                refresher.cancel()
                with contextlib.suppress(BaseException):
                    await refresher
                await self._hold(below, release=True)

    async def _refresh_holds(self, below: dict[str, int]) -> None:
        while True:
            await asyncio.sleep(HOLD_REFRESH)
            await self._hold(below)

    async def _adopt(self, below: dict[str, int]) -> bool:
        assert self._nc is not None
        offers = await ask_offers(self._nc, node_id=self.node_id, window=self.offer_window)
        usable: list[dict[str, Any]] = []
        for offer in offers:
            why = self._usable(offer, below)
            if why:
                _log.warning("statelog_snapshot_refused", donor=offer.get("node"), reason=why)
            else:
                usable.append(offer)
        usable.sort(
            key=lambda o: (
                sum(int(p.get("seq", 0)) for p in (o["manifest"].get("positions") or {}).values()),
                int(o["manifest"].get("taken_at", 0)),
            ),
            reverse=True,
        )
        if not usable:
            _log.warning(
                "statelog_no_donor",
                node=self.node_id,
                offers=len(offers),
                first_seq=below,
                retry="doubling to 5 min",
            )
            return False
        for offer in usable:
            if self._stopping:
                return False
            m = offer["manifest"]
            dest = self.dir / f"incoming-{str(m['sha256'])[:16]}.db.part"
            try:
                await fetch_artefact(self._nc, offer, dest, node_id=self.node_id)
                await asyncio.to_thread(verify_artefact, dest, m)
            except (SnapshotFailed, OSError) as e:
                _log.warning(
                    "statelog_snapshot_rejected", donor=offer["node"], sha256=m["sha256"], reason=str(e)
                )
                with contextlib.suppress(OSError):
                    dest.unlink()
                continue
            if self._stopping:
                with contextlib.suppress(OSError):
                    dest.unlink()
                return False
            if await self._install(dest, offer):
                return True
            if self.lost:
                return False
        return False

    async def _stop_appliers(self, why: str) -> None:
        for a in self.appliers.values():
            a.refusing = why
        await asyncio.gather(*(a.stop() for a in self.appliers.values()))

    async def _start_appliers(self) -> dict[str, int]:
        """Reset and start every applier from the file's checkpoint, except copies below their log.

        Returns:
            The domains left below their log (marked ``below_floor``, not started).
        """
        for a in self.appliers.values():
            a.reset()
            a.refusing = ""
            await a.prime()
        below = await self.below()
        for domain, a in self.appliers.items():
            if domain in below:
                a.refusing = "below_floor"
            else:
                await a.start()
        return below

    async def _install(self, path: Path, offer: dict[str, Any]) -> bool:
        m = offer["manifest"]
        lock = self.keeper._lock if self.keeper is not None else asyncio.Lock()
        async with lock:
            await self._stop_appliers("adopting")
            await self.store.detach()
            try:
                await self.store.install(path)
            except Exception as e:  # noqa: BLE001 - a failed install keeps the old file (ES-58)
                self._install_error = f"{type(e).__name__}: {e}"
                _log.error("statelog_install_failed", donor=offer["node"], sha256=m["sha256"], error=str(e))
                with contextlib.suppress(OSError):
                    path.unlink()
                if await self._reopen():
                    await self._start_appliers()
                return False
            if not await self._reopen():
                return False
            await self._watermark(m)
            await self._start_appliers()
        self.adopted = {"donor": offer["node"], "sha256": m["sha256"], "taken_at": m["taken_at"]}
        _log.info(
            "statelog_adopted",
            donor=offer["node"],
            sha256=m["sha256"],
            taken_at=m["taken_at"],
            positions={d: p["seq"] for d, p in (m.get("positions") or {}).items()},
        )
        if self.keeper is not None:
            self.keeper.invalidate()
        return True

    async def _reopen(self) -> bool:
        try:
            await self.store.reattach()
        except StoreFailed as e:
            self._lost_error = str(e)
            if not self.lost:
                self.lost = True
                _log.error("statelog_estate_lost", file=str(self.store.path), error=str(e))
            for a in self.appliers.values():
                a.refusing = "estate_lost"
            return False
        if self.lost:
            self.lost = False
            _log.info("statelog_estate_recovered", file=str(self.store.path))
        return True

    async def _recover_lost(self) -> None:
        async with self._busy:
            if self.lost and await self._reopen() and await self._start_appliers():
                self.trigger()

    async def _watermark(self, manifest: dict[str, Any]) -> None:
        """ES-8: an artefact without a ledger makes the join instant this copy's ledger watermark."""
        if "statelog_ledger" in (manifest.get("migrations") or {}):
            return
        if "statelog_ledger_watermark" not in EstateModel.metadata.tables:
            return
        from ._sweep import record_watermark  # the watermark's owner (ES-8, ES-85)

        now = int(time.time() * 1_000_000)

        def write(conn: Any) -> None:
            for domain in self.appliers:
                record_watermark(conn, domain, now, "join")

        await self.store.write(write)
