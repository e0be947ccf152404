"""The node's runtime context: what every role service of one process shares (FL-1).

One :class:`NodeContext` per process. Role services receive it at start and through their
FastAPI dependencies; they never reach each other through it except via the broker and the
coordination store. Probes (:mod:`shared.runtime._probes`) read it.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shared.config import NodeConfig

if TYPE_CHECKING:  # imported for types only: the context holds whatever the runner opened
    from shared.broker import BrokerLink
    from shared.coordination import Coordination
    from shared.objects import ObjectStore

__all__ = ["PROTOCOL_VERSION", "NodeContext", "new_owner"]

PROTOCOL_VERSION = 3
"""The lease protocol (FL-133): v2 = holding a seat consults the ledger; v3 = claims satisfy placement."""


def new_owner(node_id: str) -> str:
    """Return a fresh owner incarnation ``{node_id}:{8 hex}`` (FL-10): only this exact string renews."""
    return f"{node_id}:{secrets.token_hex(4)}"


@dataclass
class NodeContext:
    """Everything one node process shares between its roles.

    Attributes:
        cfg: The validated node file.
        company: The active company document as written (``${VAR}`` references intact; what
            ``GET /config`` shows), or None when unconfigured.
        resolved: The same document with its secrets resolved at apply time (CO-5); never logged.
        org: The org model built from ``resolved``, or None.
        owner: This incarnation's owner string (FL-10).
        link: The broker link once connected.
        coord: The coordination store once provisioned.
        objects: The company's object store once opened and its ``objects`` slot claimed (ES-70, ES-71).
        started_at: ``time.monotonic()`` at process start.
        boot_done: True once every role finished its start work.
        draining: True from the first SIGTERM/SIGINT (FL-129).
        in_flight: Turns running now.
        seats_held: Seat handle → epoch this node holds.
        extras: Per-role handles (keyed by role name) that probes or other code may read.
    """

    cfg: NodeConfig
    company: Any = None
    resolved: Any = None
    org: Any = None
    owner: str = ""
    link: BrokerLink | None = None
    coord: Coordination | None = None
    objects: ObjectStore | None = None
    started_at: float = field(default_factory=time.monotonic)
    boot_done: bool = False
    draining: bool = False
    in_flight: int = 0
    seats_held: dict[str, int] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)
    drained: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        if not self.owner:
            self.owner = new_owner(self.cfg.node_id)

    @property
    def node_id(self) -> str:
        """This node's id."""
        return self.cfg.node_id

    @property
    def roles(self) -> list[str]:
        """The resolved roles, sorted."""
        return sorted(self.cfg.roles)

    @property
    def posture(self) -> str:
        """The config posture (FL-111): the reconciler's (``ctx.extras["posture"]``), else
        ``serve`` once configured and ``wait`` before."""
        p = self.extras.get("posture")
        if isinstance(p, str):
            return p
        return "serve" if self.company is not None else "wait"

    @property
    def shedding(self) -> bool:
        """True while the posture is ``shed`` or ``stuck``: refuse new work, hold no seat (FL-113)."""
        return self.posture in ("shed", "stuck")

    def ready(self) -> tuple[bool, str, str]:
        """Return ``(ready, reason, detail)`` for ``GET /ready`` (FL-127, FL-128).

        Reasons, first failing cause first: ``draining``, ``unconfigured`` (boot not finished or no
        company), ``broker_unlinked`` (the connection is reconnecting), ``shed`` / ``stuck`` (this
        node cannot apply the epoch its peers applied, FL-112; ``detail`` carries the apply error),
        ``admission_withheld`` (a node without data before a data node confirmed a level copy, or
        while none answers, FL-144/FL-63; ``detail`` says what the data nodes said).
        A drain outranks posture.
        """
        if self.draining:
            return False, "draining", "the node is draining"
        if not self.boot_done or self.company is None:
            return (
                False,
                "unconfigured",
                "boot work not finished" if not self.boot_done else "no active company",
            )
        if self.link is not None and not self.link.connected:
            return False, "broker_unlinked", f"reconnecting to {self.link.url}"
        if self.shedding:
            error = str(self.extras.get("config_error") or "")
            epoch = self.extras.get("config_target_epoch", 0)
            return False, self.posture, f"cannot apply config epoch {epoch} that peers applied: {error}"
        withheld = self.extras.get("admission_withheld")
        if withheld:  # FL-144/FL-63: a node without data claims nothing until a data node is level
            return False, "admission_withheld", str(withheld)
        return True, "", ""

    def health(self) -> dict[str, Any]:
        """Return the health envelope of ``GET /health`` (FL-126)."""
        status = "draining" if self.draining else ("ok" if self.boot_done else "starting")
        seats = self.extras.get("seats_health")
        seats_block: dict[str, Any] = {"held": sorted(self.seats_held), "count": len(self.seats_held)}
        if callable(seats):
            seats_block.update(seats())
        return {
            "status": status,
            "node": self.node_id,
            "roles": self.roles,
            "broker": self.cfg.broker_kind,
            "protocol": PROTOCOL_VERSION,
            "configured": self.company is not None,
            "in_flight": self.in_flight,
            "shutting_down": self.draining,
            "posture": self.posture,
            "applied_epoch": self.extras.get("applied_epoch", 0),
            "seats": seats_block,
            "uptime_seconds": round(time.monotonic() - self.started_at, 3),
            "watchdog_lag_seconds": round(float(lag()), 3)
            if callable(lag := self.extras.get("watchdog_lag"))
            else 0.0,
        }
