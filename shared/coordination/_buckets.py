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

__all__ = ["DUTY_CEILING", "SLOTS", "BucketSpec", "Slot", "bucket_specs"]

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
]
SLOTS: tuple[Slot, ...] = Slot.__args__  # type: ignore[attr-defined]

DUTY_CEILING = timedelta(hours=3)
"""The longest duty TTL (``skill-curator``); the duties bucket's age (FL-34, FL-92)."""


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
        ("status", timedelta(seconds=60), "per-node apply status"),
        ("config", None, "activation pointer (epoch)"),
        ("budgets", None, "token usage counters"),
        ("channels", None, "agent-to-agent channel records"),
        ("objects", None, "which object store holds the company's files; collector status"),
        ("messages", timedelta(days=7), "API message status and reply (CO-8; ours)"),
    ]
    return {slot: BucketSpec(slot, f"{prefix}_{slot}", age, holds) for slot, age, holds in table}
