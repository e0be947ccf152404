"""Lease keys and records in the ``leases`` bucket (FL-42, FL-43, FL-48, FL-133).

The spec writes resources as ``node:{id}``, ``seat:{handle}`` and ``worker:{duty}``. A NATS KV key
cannot hold ``:``, so the stored key uses ``.`` instead (``node.n1``, ``seat.triage``,
``worker.scheduler``); node ids, handles and duty names only use characters a key allows.

A record is JSON::

    {"resource": "node:n1", "owner": "n1:9f2c41aa", "node": "n1", "epoch": 0,
     "protocol": 3, "meta": {...}}

A stored record without ``protocol`` reads as protocol 1 (fail closed, FL-133); ``meta`` roles that
are absent or malformed read as all roles (fail open, FL-11).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from shared.config import ALL_ROLES

__all__ = ["LeaseRecord", "key_of", "resource_of"]


def key_of(resource: str) -> str:
    """Map a spec resource name (``node:n1``) to its KV key (``node.n1``)."""
    kind, _, name = resource.partition(":")
    if not kind or not name:
        raise ValueError(f"lease resource {resource!r} is not kind:name")
    return f"{kind}.{name}"


def resource_of(key: str) -> str:
    """Map a KV key (``node.n1``) back to the spec resource name (``node:n1``)."""
    kind, _, name = key.partition(".")
    return f"{kind}:{name}"


@dataclass(frozen=True)
class LeaseRecord:
    """One lease as stored.

    Attributes:
        resource: ``node:{id}``, ``seat:{handle}`` or ``worker:{duty}``.
        owner: The holder's incarnation ``{node_id}:{8 hex}`` (FL-10); only it renews.
        node: The holder's stable node id (the placement hint).
        epoch: The fencing token (0 for presence).
        protocol: The holder's lease protocol (FL-133).
        meta: Presence meta (roles, labels, broker kind, posture, ...) or seat details.
        ttl: The lease TTL in seconds the holder renews against (FL-48); 0 when not stated. Only
            written when set, so records from before the field read and write unchanged.

    .. versionchanged:: 0.1
        ``ttl`` added (additive, FL-136).
    """

    resource: str
    owner: str
    node: str
    epoch: int = 0
    protocol: int = 1
    meta: dict[str, Any] = field(default_factory=dict)
    ttl: float = 0.0

    def encode(self) -> bytes:
        """Serialise to the stored JSON bytes."""
        data: dict[str, Any] = {
            "resource": self.resource,
            "owner": self.owner,
            "node": self.node,
            "epoch": self.epoch,
            "protocol": self.protocol,
            "meta": self.meta,
        }
        if self.ttl > 0:
            data["ttl"] = self.ttl
        return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, key: str, raw: bytes) -> LeaseRecord:
        """Parse stored bytes; a malformed record reads with safe defaults rather than failing.

        Args:
            key: The KV key it was stored under.
            raw: The stored bytes.
        """
        try:
            data = json.loads(raw)
        except ValueError:
            data = {}
        if not isinstance(data, dict):
            data = {}
        raw_meta = data.get("meta")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        protocol = data.get("protocol")
        epoch = data.get("epoch")
        ttl = data.get("ttl")
        return cls(
            resource=str(data.get("resource") or resource_of(key)),
            owner=str(data.get("owner") or ""),
            node=str(data.get("node") or ""),
            epoch=epoch if isinstance(epoch, int) else 0,
            protocol=protocol if isinstance(protocol, int) else 1,
            meta=meta,
            ttl=float(ttl) if isinstance(ttl, int | float) and ttl > 0 else 0.0,
        )

    @property
    def roles(self) -> list[str]:
        """The holder's roles from presence meta; absent or malformed → all four (FL-11, fail open)."""
        roles = self.meta.get("roles")
        if not isinstance(roles, list) or not roles or not all(isinstance(r, str) for r in roles):
            return list(ALL_ROLES)
        return sorted(roles)
