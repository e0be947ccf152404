"""The coordination slots and their buckets (FL-34).

Retention is a bucket's age (stream ``max_age``), fixed at creation: one bucket per retention, and
never a per-key TTL (nats-py cannot carry a TTL on ``update``, so a renewed key would become
immortal: infra-facts N4). Bucket names are ``<prefix>_<slot>`` with the prefix ``crewlet`` unless
``coordination.bucket_prefix`` separates companies sharing an account (FL-41).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

__all__ = [
    "DUTY_CEILING",
    "SLOTS",
    "TRIM_HOLD_AGE",
    "BucketSpec",
    "Slot",
    "bucket_specs",
    "reconcile_interval",
]

Slot = Literal[
    "leases",
    "epochs",
    "duties",
    "rate",
    "claims",
    "ledger",
    "fires",
    "cooldowns",
    "status",
    "config",
    "budgets",
    "channels",
    "objects",
    "messages",
    "secrets",
    "revisions",
    "wakes",
    "positions",
    "trim_floors",
    "trim_holds",
    "backups",
]
SLOTS: tuple[Slot, ...] = Slot.__args__  # type: ignore[attr-defined]

TRIM_HOLD_AGE = timedelta(minutes=3)
"""Age of the ``trim_holds`` bucket: a hold not re-put within this lapses (holders re-put every 30 s)."""

DUTY_CEILING = timedelta(hours=3)
"""The longest duty TTL (``skill-curator``); the duties bucket's age (FL-34, FL-92)."""


def reconcile_interval(lease_ttl: timedelta) -> timedelta:
    """The control plane's reconcile (poll) interval: one heartbeat, TTL/3 (FL-108, FL-110).

    15 s at the default 45 s TTL, as the spec's numbers table has it; derived rather than fixed so a
    test fleet with a short TTL reconciles as fast as it heartbeats. The ``status`` bucket's age is
    four of these (60 s by default): a node that stops reporting vanishes from it.
    """
    return lease_ttl / 3


@dataclass(frozen=True)
class BucketSpec:
    """One coordination bucket.

    Attributes:
        slot: The slot name callers use.
        bucket: The KV bucket name (``<prefix>_<slot>``).
        age: The bucket's ``max_age``; None keeps keys until deleted.
        holds: What the bucket answers (for operators).
    """

    slot: Slot
    bucket: str
    age: timedelta | None
    holds: str


def bucket_specs(prefix: str, *, lease_ttl: timedelta) -> dict[Slot, BucketSpec]:
    """Return every coordination bucket for ``prefix`` (FL-34's table).

    Args:
        prefix: The bucket prefix (``crewlet``).
        lease_ttl: The seat and presence lease TTL; the ``leases`` bucket's age.

    Returns:
        Slot → spec, for every slot in :data:`SLOTS`.
    """
    table: list[tuple[Slot, timedelta | None, str]] = [
        ("leases", lease_ttl, "seat and presence ownership"),
        ("epochs", None, "per-resource epoch counter and placement hint"),
        ("duties", DUTY_CEILING, "worker:{duty} leases (deadline in the record)"),
        ("rate", timedelta(seconds=3), "notification valve windows"),
        ("claims", timedelta(minutes=5), "inbound delivery dedupe"),
        ("ledger", timedelta(days=7), "turn completions"),
        ("fires", timedelta(days=7), "scheduled-fire claims"),
        ("cooldowns", timedelta(hours=24), "credential cooldown end instants"),
        ("status", 4 * reconcile_interval(lease_ttl), "per-node apply status (4 reconcile intervals)"),
        ("config", None, "activation pointer (epoch)"),
        ("budgets", None, "token usage counters"),
        ("channels", None, "agent-to-agent channel records"),
        ("objects", None, "which object store holds the company's files; collector status"),
        ("messages", timedelta(days=7), "API message status and reply (CO-8; ours)"),
        ("secrets", None, "company credentials sealed under the Tier A keyring (FL-151, CO-40)"),
        ("revisions", None, "company revision history, sealed bodies with their origin (CO-4; ours)"),
        # CO-41's window (6 comment wakes per seat and item per hour) is this bucket's age (FL-34)
        ("wakes", timedelta(hours=1), "comment wakes per seat and item in the last hour (CO-41; ours)"),
        # ES-23: each data node's applied position per log, re-put every 10 s
        ("positions", None, "per-log applied position, lag and snapshot of every data node (ES-23, ES-54)"),
        ("trim_floors", None, "per-log trim floor and its terms; never lowered within a generation (ES-48)"),
        # ES-81/ES-57: a hold is re-put while its backup or join runs; a holder that dies lets it lapse
        ("trim_holds", TRIM_HOLD_AGE, "live trim holds of backups and joining nodes (ES-47, ES-57, ES-81)"),
        ("backups", None, "per-node newest verified backup and what it reaches per log (ES-82)"),
    ]
    return {slot: BucketSpec(slot, f"{prefix}_{slot}", age, holds) for slot, age, holds in table}
