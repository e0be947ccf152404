"""Opening the configured store, and the ``objects`` coordination slot (ES-70, ES-71, FL-5).

Every node, stateless ones included, carries the same ``store.objects`` block and reaches the one
store directly (ES-70). The first node to boot records the store's identity in the coordination
``objects`` slot under :data:`SLOT_KEY`; any later node configured with another store refuses to
boot, naming both (ES-71, FL-5: "a second node pointed at another bucket refuses to start, naming
the recorded store"). The slot is never rewritten here: moving a company's files to another store
is an operator's act (copy the objects, delete the key while no node runs).
"""

from __future__ import annotations

import json
from typing import Any

from shared import logs
from shared.broker import BrokerLink
from shared.config import NodeConfig
from shared.coordination import Coordination, CoordinationUnavailable, OutcomeUnknown, RevisionConflict

from ._base import ObjectStore
from ._errors import ObjectStoreMisconfigured, ObjectStoreMismatch
from ._nats import open_nats_store
from ._s3 import open_s3_store

__all__ = ["SLOT_KEY", "claim_objects_slot", "describe", "open_object_store"]

SLOT_KEY = "store"
"""Key in the ``objects`` slot holding the recorded store's identity (JSON)."""

_log = logs.get("objects")


async def open_object_store(
    cfg: NodeConfig, link: BrokerLink | None, *, budget: float | None = None
) -> ObjectStore:
    """Open the store ``cfg.store.objects`` names, creating its bucket if absent (ES-70, ES-72, ES-73).

    Args:
        cfg: The node config: ``store.objects`` (type, bucket, endpoint_url, region) and, for
            ``nats``, ``stream.replicas`` (the bucket's replicas, FL-25).
        link: The process's broker link; required for ``nats``, unused for ``s3``.
        budget: Seconds to keep trying to create or reach the bucket; default 30 s solo, 120 s when
            clustered or replicated (FL-28's budgets).

    Returns:
        The store; close it after the node's drain (:meth:`ObjectStore.close`).

    Raises:
        ObjectStoreMisconfigured: ``nats`` without a broker link, an invalid bucket name, or S3
            credentials missing or refused.
        ObjectStoreMismatch: the nats bucket exists with fewer replicas than ``stream.replicas``.
        ObjectStoreUnavailable: the bucket could not be created or reached within ``budget``.
    """
    objects = cfg.store.objects
    if budget is None:
        budget = 120.0 if (cfg.clustered or cfg.stream.replicas > 1) else 30.0
    store: ObjectStore
    if objects.type == "nats":
        if link is None:
            raise ObjectStoreMisconfigured(
                "store.objects.type: nats needs the broker connection (none was given)"
            )
        store = await open_nats_store(link.js, objects.bucket, replicas=cfg.stream.replicas, budget=budget)
    else:
        store = await open_s3_store(
            objects.bucket, endpoint_url=objects.endpoint_url, region=objects.region, budget=budget
        )
    _log.info("objects_store_opened", **store.identity())
    return store


def describe(identity: dict[str, Any]) -> str:
    """Return a store identity as operators read it, e.g. ``s3 bucket files at http://127.0.0.1:8333``.

    Args:
        identity: A :meth:`ObjectStore.identity` mapping (or what the slot recorded).
    """
    kind = identity.get("type", "?")
    text = f"{kind} bucket {identity.get('bucket', '?')}"
    if kind == "s3":
        text += f" at {identity.get('endpoint_url') or 'the AWS default endpoint'}"
    return text


async def claim_objects_slot(coord: Coordination, store: ObjectStore) -> None:
    """Record ``store`` in the ``objects`` slot if none is recorded; refuse a different one (ES-71, FL-5).

    Idempotent: a node whose store equals the recorded one passes. A create whose answer was lost
    (:class:`~shared.coordination.OutcomeUnknown`) is settled by re-reading.

    Args:
        coord: The coordination store.
        store: The opened object store.

    Raises:
        ObjectStoreMismatch: another store is recorded; the message names the recorded and the
            configured store (non-retryable: the node must not boot).
        CoordinationUnavailable: the slot could not be read or written, or kept changing under three
            attempts (retryable; the answer is unknown).
    """
    mine = store.identity()
    value = json.dumps(mine, sort_keys=True).encode()
    for _attempt in range(3):
        try:
            await coord.create("objects", SLOT_KEY, value)
            _log.info("objects_store_recorded", **mine)
            return
        except (RevisionConflict, OutcomeUnknown):
            pass
        entry = await coord.get("objects", SLOT_KEY)
        if entry is None:
            continue  # deleted between the create and the read (an operator's reset): try again
        try:
            recorded = json.loads(entry.value)
        except ValueError:
            recorded = {"type": "?", "bucket": entry.value.decode(errors="replace")}
        if isinstance(recorded, dict) and {k: str(v) for k, v in recorded.items()} == mine:
            return
        recorded_dict = recorded if isinstance(recorded, dict) else {"type": "?", "bucket": str(recorded)}
        raise ObjectStoreMismatch(
            f"object store differs from the one recorded: the company's files are in "
            f"{describe(recorded_dict)} (recorded in the coordination 'objects' slot) but this node is "
            f"configured for {describe(mine)}; every node must carry the same store.objects block (ES-70, FL-5)"
        )
    raise CoordinationUnavailable(f"the 'objects' slot kept changing while recording {describe(mine)}")
