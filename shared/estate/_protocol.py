"""The estate's call surface: what a data node is asked and what it answers (ES-38).

The router (``shared.router``) carries :class:`Call` and :class:`Answer` over NATS request/reply to
``crewlet.estate.rpc.<node_id>``, or hands them to this node's own copy in-process. The operation
table (``OPS``: operation → its log and whether it writes) is built from the registered domains
(:mod:`shared.estate.domains`). A base module: it imports nothing of the estate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["PROTOCOL", "Answer", "Call", "OpKind", "ReadLevel", "Status"]

PROTOCOL = 1
"""The router wire protocol version (ES-38). An unknown version is answered ``ran_nothing``."""

ReadLevel = Literal["linearizable", "session", "stale", "consistent_prefix"]
OpKind = Literal["read", "write"]
Status = Literal["ran", "ran_nothing", "unvouched"]


@dataclass
class Call:
    """One request to the estate (ES-38).

    Attributes:
        op: The operation (a key of :data:`OPS`).
        args: Its arguments.
        op_id: The operation id of a write (ES-6); empty for reads.
        floors: Stream → the furthest sequence the asker was told its writes landed at (ES-37),
            for the call's own domain only.
        read_level: The consistency level asked for (ES-25).
        min_position: A position token the answer must include (ES-27), or None.
        deadline: The caller's deadline, unix seconds; 0 for none.
        take_anyway: Serve even if this copy lags (ES-34: the router's last resort).
        asker: The asking node's id.
    """

    op: str
    args: dict[str, Any] = field(default_factory=dict)
    op_id: str = ""
    floors: dict[str, int] = field(default_factory=dict)
    read_level: ReadLevel = "stale"
    min_position: str | None = None
    deadline: float = 0.0
    take_anyway: bool = False
    asker: str = ""


@dataclass
class Answer:
    """A data node's reply (ES-38).

    Attributes:
        status: ``ran`` (with ``result`` or ``error``), ``ran_nothing`` (with ``reason``: the router
            may ask another node) or ``unvouched`` (a write whose fate this node cannot establish).
        node: The answering node's id.
        positions: Stream → the sequence this copy has applied.
        result: The operation's result when it ran and succeeded.
        error: The refusal (``{"code", "detail", ...}``) when it ran and refused.
        reason: Why nothing ran: ``out_of_service``, ``lagging``, ``behind``, ``not_serving``,
            ``stalled``, ``no_quorum``, ``broker_unreachable``, ``maintenance``, ``protocol``...
        detail: Words for the operator.
        retry_after: Seconds before asking this node again is worthwhile; None for no hint.
    """

    status: Status
    node: str
    positions: dict[str, int] = field(default_factory=dict)
    result: Any = None
    error: dict[str, Any] | None = None
    reason: str = ""
    detail: str = ""
    retry_after: float | None = None
