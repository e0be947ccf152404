"""The contract every role service implements so the node runner can mount it (FL-1)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from fastapi import APIRouter

from ._context import NodeContext

__all__ = ["RoleService"]


async def _nothing(ctx: NodeContext) -> None:
    return None


@dataclass
class RoleService:
    """One role's mountable parts.

    Attributes:
        name: ``data``, ``ingress``, ``seats`` or ``workers``.
        router: The role's HTTP routes, or None (only ingress serves the API; FL-16).
        start: Boot work, awaited in role order ``data → ingress → seats → workers`` before the
            node reports ready. Starts the role's background loops.
        drain: Called on the first signal (FL-129), in reverse order: stop admitting new work and
            let running work finish. The listener stays open meanwhile.
        stop: Called after every role drained: release what the role holds.
    """

    name: str
    router: APIRouter | None = None
    start: Callable[[NodeContext], Awaitable[None]] = field(default=_nothing)
    drain: Callable[[NodeContext], Awaitable[None]] = field(default=_nothing)
    stop: Callable[[NodeContext], Awaitable[None]] = field(default=_nothing)
