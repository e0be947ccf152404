"""Opening one data node's estate: file, logs, appliers, service, heartbeat, snapshots and catch-up
(ES-1, ES-4, ES-16, ES-23, ES-53..ES-58).

:func:`open_estate` is what the data role calls at start; :meth:`Estate.close` at stop. A node
without the data role never calls it (ES-2): it opens no estate file and reaches the estate through
the router only.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.js import JetStreamContext

from shared import logs

from ._seed import company_seed
from ._service import EstateService
from .domains import LOGS, REGISTERED, apply_for
from .life._catchup import OFFER_WINDOW, CatchUp, SnapshotDonor
from .life._snapshot import RETRY_AFTER, SnapshotKeeper
from .log._applier import Applier
from .log._decide import Rules
from .log._log import StateLog, StreamFacts
from .log._positions import PositionBeat
from .store._store import EstateStore

__all__ = ["Estate", "open_estate", "rules_from_company"]

_log = logs.get("statelog")


def rules_from_company(company: Any, org: Any) -> Rules:
    """Return the decide-time rules of a company: types (built-ins + ``tracker.types``) and seat handles."""
    types = ["task", "bug", "epic", "story", "spike", "chore"]
    tracker = getattr(company, "tracker", None)
    for t in getattr(tracker, "types", []) or []:
        if not getattr(t, "archived", False) and t.slug not in types:
            types.append(t.slug)
    seats: frozenset[str] | None = None
    if org is not None:
        seats = frozenset(s.handle for s in (*getattr(org, "seats", ()), *getattr(org, "humans", ())))
    return Rules(types=tuple(types), seats=seats)


class Estate:
    """An open estate: its parts, for the data role and its tests.

    Attributes:
        store: The estate file.
        log: The state logs.
        appliers: Domain → applier.
        service: The callable copy (the router's local handler).
        beat: The position heartbeat.
        snapshots: The snapshot keeper (ES-53: ``.latest() -> manifest | None``, ``.skip_reason``), or
            None when no ``snapshot_dir`` was given.
        catchup: The below-the-log handling (ES-57, ES-58): ``.adopted``, ``.lost``.
        donor: The snapshot donor (ES-56), or None without a connection or keeper.
    """

    def __init__(
        self,
        store: EstateStore,
        log: StateLog,
        appliers: dict[str, Applier],
        service: EstateService,
        beat: PositionBeat,
        snapshots: SnapshotKeeper | None = None,
        catchup: CatchUp | None = None,
        donor: SnapshotDonor | None = None,
    ) -> None:
        self.store = store
        self.log = log
        self.appliers = appliers
        self.service = service
        self.beat = beat
        self.snapshots = snapshots
        self.catchup = catchup
        self.donor = donor

    async def wait_level(self, timeout: float) -> bool:
        """Wait until every applier has reached its log's end once; False after ``timeout`` seconds."""
        results = await asyncio.gather(*(a.wait_drained(timeout) for a in self.appliers.values()))
        return all(results)

    async def seed(self, org: Any) -> list[dict[str, Any]]:
        """Write the company's projects and spaces (idempotent: derived op ids, CO-24/25).

        Returns:
            One ``{"op", "key", "outcome"|"error"}`` per seed write; failures are logged, not raised
            (a later boot or a peer seeds again under the same ids).
        """
        out = []
        for call in company_seed(org):
            ans = await self.service.serve(call)
            row: dict[str, Any] = {"op": call.op, "key": call.args.get("key")}
            if ans.status == "ran" and ans.error is None:
                row["outcome"] = ans.result["outcome"]
            else:
                row["error"] = ans.error or {"reason": ans.reason, "detail": ans.detail}
                _log.warning("estate_seed_failed", op=call.op, key=call.args.get("key"), answer=row["error"])
            out.append(row)
        return out

    async def close(self) -> None:
        """Stop catch-up, snapshots and the heartbeat, the appliers (each finishes its batch), then close."""
        if self.catchup is not None:
            await self.catchup.stop()
        if self.donor is not None:
            await self.donor.stop()
        if self.snapshots is not None:
            await self.snapshots.stop()
        await self.beat.stop()
        await asyncio.gather(*(a.stop() for a in self.appliers.values()))
        self.store.close()


async def open_estate(
    js: JetStreamContext,
    *,
    node_id: str,
    store_dir: Path,
    replicas: int = 1,
    rules: Rules | None = None,
    positions_bucket: str = "crewlet_positions",
    retry_budget: float = 30.0,
    heartbeat: float = 10.0,
    floor_wait: float = 2.0,
    wal_limit: int = 64 << 20,
    checkpoint_interval: float = 30.0,
    nc: Client | None = None,
    snapshot_dir: Path | None = None,
    snapshot_interval: float = 86_400.0,
    snapshot_retry: float = RETRY_AFTER,
    coord: Any = None,
    offer_window: float = OFFER_WINDOW,
    catchup_retry: float = 5.0,
) -> Estate:
    """Open this data node's estate and start applying.

    Args:
        js: The node's one JetStream context.
        node_id: This node's id.
        store_dir: ``store.dir``; the file is ``<store_dir>/estate.db``.
        replicas: ``stream.replicas`` for streams and the positions bucket.
        rules: Decide-time company facts.
        positions_bucket: The ES-23 register's bucket name.
        retry_budget: Seconds of failing applies before a copy faults (ES-20).
        heartbeat: Seconds between position reports (ES-23).
        floor_wait: Seconds a call waits for the asker's floors before ``behind`` (ES-37: 2).
        wal_limit: The estate WAL's ``journal_size_limit`` in bytes (``retention.wal_limit_bytes``).
        checkpoint_interval: Seconds between TRUNCATE checkpoints of the WAL (``retention.checkpoint_interval``).
        nc: The node's connection (``ctx.link.nc``): donating and asking for snapshots (ES-56). None: a
            copy below its log stays out of service (nobody to ask).
        snapshot_dir: ``store.snapshot_dir``; None takes no snapshots (and donates none). Fetched
            artefacts land there too (default ``<store_dir>/snapshots``).
        snapshot_interval: Seconds: at most one snapshot per interval (ES-53, default 24 h).
        snapshot_retry: Seconds before a declined snapshot is tried again (ES-54: 30).
        coord: A Coordination for the ``trim_holds`` join hold (ES-57), or None.
        offer_window: Seconds a joiner collects snapshot offers (ES-56: 5).
        catchup_retry: First ask-again interval of a copy below its log with no donor (doubles to 5 min).

    Returns:
        The open estate; appliers are running (they may still be catching up: see
        :meth:`Estate.wait_level`). A copy found below its log at boot adopts a peer's snapshot first
        (ES-57); with no donor its applier is not started and it refuses ``below_floor``.

    Raises:
        StoreFailed: the estate file is held by another process or unreadable.
        Refused: the log streams could not be created or read (``broker_unreachable``).
    """
    started = time.monotonic()
    store = await EstateStore.open(store_dir / "estate.db", wal_limit=wal_limit)
    store.start_checkpoints(checkpoint_interval)
    async with _Parts(store) as parts:  # a failure stops what was started and closes the file
        log = StateLog(js, replicas=replicas)
        facts = await log.provision()
        appliers = parts.appliers = _appliers(js, store, node_id, facts, retry_budget, started)
        parts.keeper = _keeper(node_id, store, appliers, snapshot_dir, snapshot_interval, snapshot_retry)
        parts.catchup = CatchUp(
            nc=nc, node_id=node_id, store=store, log=log, appliers=appliers,
            snapshot_dir=snapshot_dir or store_dir / "snapshots", keeper=parts.keeper, coord=coord,
            offer_window=offer_window, retry_first=catchup_retry,
        )  # fmt: skip
        await _start_appliers(appliers, parts.catchup)
        service = EstateService(
            node_id=node_id, store=store, log=log, appliers=appliers, rules=rules, floor_wait=floor_wait
        )
        beat = PositionBeat(
            js, node_id=node_id, appliers=appliers, log=log, store=store, bucket=positions_bucket,
            replicas=replicas, interval=heartbeat,
        )  # fmt: skip
        donor = await _start_beat(beat, parts.catchup, parts.keeper, nc, node_id)
    return Estate(store, log, appliers, service, beat, parts.keeper, parts.catchup, donor)


def _keeper(
    node_id: str,
    store: EstateStore,
    appliers: dict[str, Applier],
    snapshot_dir: Path | None,
    interval: float,
    retry: float,
) -> SnapshotKeeper | None:
    """The snapshot keeper (ES-53), or None when no ``snapshot_dir`` was given; not started yet."""
    if snapshot_dir is None:
        return None
    return SnapshotKeeper(
        node_id=node_id,
        store=store,
        appliers=appliers,
        snapshot_dir=snapshot_dir,
        interval=interval,
        retry=retry,
    )


class _Parts:
    """What :func:`open_estate` has built so far; leaving the block with an exception stops it all
    (catch-up, the snapshot keeper, the appliers) and closes the estate file."""

    def __init__(self, store: EstateStore) -> None:
        self.store = store
        self.appliers: dict[str, Applier] = {}
        self.keeper: SnapshotKeeper | None = None
        self.catchup: CatchUp | None = None

    async def __aenter__(self) -> _Parts:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *_exc: object) -> bool:
        if kind is None:
            return False
        if self.catchup is not None:
            await self.catchup.stop()
        if self.keeper is not None:
            await self.keeper.stop()
        await asyncio.gather(*(a.stop() for a in self.appliers.values()), return_exceptions=True)
        self.store.close()
        return False


def _appliers(
    js: JetStreamContext,
    store: EstateStore,
    node_id: str,
    facts: dict[str, StreamFacts],
    retry_budget: float,
    started: float,
) -> dict[str, Applier]:
    """One applier per registered log, applying through the registry (ES-16); none started yet."""
    appliers: dict[str, Applier] = {}
    for domain in LOGS:
        a = Applier(
            domain=domain,
            js=js,
            store=store,
            node_id=node_id,
            apply=apply_for(domain),
            stream_created_at=facts[domain].created_at,
            retry_budget=retry_budget,
        )
        corpus = next((d.corpus for d in REGISTERED if d.log == domain and d.corpus), "")
        if not corpus:  # a log without a lexical index (memory) builds none to announce
            appliers[domain] = a
            continue

        def built(source: str = corpus, ap: Applier = a) -> None:
            _log.info(
                "lexical_index_built",
                source=source,
                pending=0,
                position=ap.applied,
                elapsed_ms=int((time.monotonic() - started) * 1000),
            )

        a.on_drained = built
        appliers[domain] = a
    return appliers


async def _start_appliers(appliers: dict[str, Applier], catchup: CatchUp) -> None:
    """Let catch-up adopt a snapshot first when a copy is below its log (ES-57), then start the rest."""
    for a in appliers.values():
        a.on_below = catchup.trigger
    await catchup.boot()  # ES-57: before any applier applies
    for a in appliers.values():
        if not a.running and not a.refusing:
            await a.start()


async def _start_beat(
    beat: PositionBeat, catchup: CatchUp, keeper: SnapshotKeeper | None, nc: Client | None, node_id: str
) -> SnapshotDonor | None:
    """Wire the heartbeat to catch-up and the snapshot keeper, start them, and the donor (ES-56) when
    there is a keeper and a connection; return the donor."""
    beat.on_heads = catchup.on_heads
    if keeper is not None:
        keeper.alarms = beat.alarms
        keeper.on_taken = beat.beat
        keeper._peers = beat.nodes
        beat.snapshot_fields = keeper.fields
    await beat.start()
    if keeper is None:
        return None
    keeper.start()
    if nc is None:
        return None
    donor = SnapshotDonor(nc, node_id=node_id, keeper=keeper)
    await donor.start()
    return donor
