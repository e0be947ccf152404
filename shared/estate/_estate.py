"""Opening one data node's estate: file, logs, appliers, service, heartbeat (ES-1, ES-4, ES-16, ES-23).

:func:`open_estate` is what the data role calls at start; :meth:`Estate.close` at stop. A node
without the data role never calls it (ES-2): it opens no estate file and reaches the estate through
the router only.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from nats.js import JetStreamContext

from shared import logs

from ._applier import Applier
from ._decide import Rules
from ._ids import DOMAINS
from ._log import StateLog
from ._pages import apply_pages
from ._positions import PositionBeat
from ._seed import company_seed
from ._service import EstateService
from ._store import EstateStore
from ._tracker_apply import apply_tracker

__all__ = ["Estate", "open_estate", "rules_from_company"]

_log = logs.get("statelog")
_APPLY = {"tracker": apply_tracker, "pages": apply_pages}
_CORPUS = {"tracker": "work_items", "pages": "pages"}


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
    """

    def __init__(
        self,
        store: EstateStore,
        log: StateLog,
        appliers: dict[str, Applier],
        service: EstateService,
        beat: PositionBeat,
    ) -> None:
        self.store = store
        self.log = log
        self.appliers = appliers
        self.service = service
        self.beat = beat

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
        """Stop the heartbeat and the appliers (each finishes its batch), then close the file."""
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

    Returns:
        The open estate; appliers are running (they may still be catching up: see :meth:`Estate.wait_level`).

    Raises:
        StoreFailed: the estate file is held by another process or unreadable.
        Refused: the log streams could not be created or read (``broker_unreachable``).
    """
    started = time.monotonic()
    store = await EstateStore.open(store_dir / "estate.db", wal_limit=wal_limit)
    store.start_checkpoints(checkpoint_interval)
    appliers: dict[str, Applier] = {}
    try:
        log = StateLog(js, replicas=replicas)
        facts = await log.provision()
        for domain in DOMAINS:
            a = Applier(
                domain=domain,
                js=js,
                store=store,
                node_id=node_id,
                apply=_APPLY[domain],
                stream_created_at=facts[domain].created_at,
                retry_budget=retry_budget,
            )

            def built(d: str = domain, ap: Applier = a) -> None:
                _log.info(
                    "lexical_index_built",
                    source=_CORPUS[d],
                    pending=0,
                    position=ap.applied,
                    elapsed_ms=int((time.monotonic() - started) * 1000),
                )

            a.on_drained = built
            appliers[domain] = a
        for a in appliers.values():
            await a.start()
        service = EstateService(
            node_id=node_id, store=store, log=log, appliers=appliers, rules=rules, floor_wait=floor_wait
        )
        beat = PositionBeat(
            js,
            node_id=node_id,
            appliers=appliers,
            log=log,
            store=store,
            bucket=positions_bucket,
            replicas=replicas,
            interval=heartbeat,
        )
        await beat.start()
    except BaseException:
        await asyncio.gather(*(a.stop() for a in appliers.values()), return_exceptions=True)
        store.close()
        raise
    return Estate(store, log, appliers, service, beat)
