"""What an asking turn needs that its tool context does not carry: the bus, the store and the
trigger's delegation bookkeeping (CO-36).

The dispatcher binds an :class:`AskScope` around one turn (:func:`bind`); the ``a2a_ask`` tool
reads it with :func:`current`. A context variable, because the tool handler runs inside the turn's
task (and any task it starts copies the context), while the turn engine that builds the tool
context knows nothing of buses. A turn run without a bound scope (an engine in a unit test, the
CLI) has no ``a2a_ask``: the tool answers a clear error instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shared.bus import Bus
from shared.coordination import Coordination

if TYPE_CHECKING:
    from shared.triggers import Trigger

__all__ = ["AskScope", "bind", "current"]

_current: ContextVar[AskScope | None] = ContextVar("crewlet_ask_scope", default=None)


@dataclass(frozen=True)
class AskScope:
    """One turn's means to ask (CO-36).

    Attributes:
        coord: The coordination store (the ``channels`` slot).
        bus: The node's bus (the target's inbox).
        work_key: The asking turn's ``work_key`` (CO-19): part of the channel id.
        delegation_depth: The asking turn's trigger depth (CO-11); a request goes out one deeper.
        delegation_chain: The seats the asking turn's trigger passed through, oldest first.
        work_item: The item the asking turn's trigger names, ``{"key", "id"?, ...}``, or None.
        trace_headers: ``traceparent``/``tracestate`` for the request; None takes the current span's
            (the ``a2a_ask`` tool call's), so the target's turn joins the asker's trace.
    """

    coord: Coordination
    bus: Bus
    work_key: str
    delegation_depth: int = 0
    delegation_chain: tuple[str, ...] = ()
    work_item: Mapping[str, Any] | None = None
    trace_headers: Mapping[str, str] | None = field(default=None)

    @classmethod
    def for_trigger(cls, coord: Coordination, bus: Bus, trigger: Trigger) -> AskScope:
        """The scope of a turn on ``trigger``: its depth, ``work_key``, item and chain (the chain
        from the payload's ``delegation_chain``, written by :func:`shared.channels.ask`)."""
        chain = trigger.payload.get("delegation_chain") if trigger.payload else None
        return cls(
            coord=coord,
            bus=bus,
            work_key=trigger.work_key,
            delegation_depth=trigger.delegation_depth,
            delegation_chain=tuple(str(h) for h in chain) if isinstance(chain, list | tuple) else (),
            work_item=dict(trigger.work_item) if trigger.work_item else None,
        )


@contextlib.contextmanager
def bind(scope: AskScope | None) -> Iterator[AskScope | None]:
    """Make ``scope`` the current one for the ``with`` block (None binds nothing: no asks).

    Yields:
        ``scope``.
    """
    token = _current.set(scope)
    try:
        yield scope
    finally:
        _current.reset(token)


def current() -> AskScope | None:
    """The scope bound around the running turn, or None when none is (asks are unavailable)."""
    return _current.get()
