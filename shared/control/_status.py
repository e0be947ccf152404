"""Per-node apply status in the ``status`` slot (FL-110, FL-117).

One key per node id, last write wins, re-stamped every reconcile tick whether or not anything
changed. The bucket's age is four reconcile intervals (60 s by default), so a node that stops
reporting vanishes; posture and the fleet view read only what is there.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from shared.coordination import Coordination

from ._records import now_iso

__all__ = ["ERROR_TEXT_LIMIT", "NodeStatus", "cut_text", "read_statuses", "write_status"]

ERROR_TEXT_LIMIT = 2000
"""Bytes of error text a status carries, cut on a character boundary (FL-110)."""

ApplyStatus = Literal["ok", "error", "degraded", "none"]


def cut_text(text: str, limit: int) -> tuple[str, bool]:
    """Cut ``text`` to at most ``limit`` UTF-8 bytes on a character boundary; True when cut."""
    raw = text.encode()
    if len(raw) <= limit:
        return text, False
    return raw[:limit].decode(errors="ignore"), True


@dataclass
class NodeStatus:
    """One node's apply status (FL-110).

    Attributes:
        node: The node id.
        applied_epoch: The config epoch this node runs (0: none yet).
        revision_id: The revision of that epoch.
        status: ``ok`` (applied), ``error`` (refused before mutating anything; the previous epoch
            still runs), ``degraded`` (failed after mutating), ``none`` (nothing applied yet).
        error: The last failure's text, at most :data:`ERROR_TEXT_LIMIT` bytes.
        target_epoch: The fleet's epoch this node last saw.
        posture: ``serve`` / ``wait`` / ``shed`` / ``stuck`` / ``isolated`` (FL-111).
        reported_at: ISO-8601 UTC of this report.
    """

    node: str
    applied_epoch: int = 0
    revision_id: str = ""
    status: ApplyStatus = "none"
    error: str = ""
    target_epoch: int = 0
    posture: str = "wait"
    reported_at: str = field(default_factory=now_iso)

    def encode(self) -> bytes:
        """JSON bytes, the error cut to :data:`ERROR_TEXT_LIMIT` bytes."""
        data = asdict(self)
        data["error"], _ = cut_text(self.error, ERROR_TEXT_LIMIT)
        return json.dumps(data).encode()

    @classmethod
    def decode(cls, node: str, raw: bytes) -> NodeStatus:
        """Read a status record (unknown fields ignored; a malformed one reads as ``none``)."""
        try:
            data: dict[str, Any] = json.loads(raw)
        except ValueError:
            return cls(node=node)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["node"] = node
        return cls(**known)


async def write_status(coord: Coordination, status: NodeStatus) -> None:
    """Stamp this node's status (last write wins).

    Raises:
        CoordinationUnavailable: the store did not answer (the next tick stamps again).
    """
    status.reported_at = now_iso()
    await coord.put("status", status.node, status.encode())


async def read_statuses(coord: Coordination) -> dict[str, NodeStatus]:
    """Every fresh node status (the bucket ages out a node silent for 4 intervals), by node id.

    Raises:
        CoordinationUnavailable: the store did not answer.
    """
    return {e.key: NodeStatus.decode(e.key, e.value) for e in await coord.entries("status")}
