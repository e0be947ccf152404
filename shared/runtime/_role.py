"""The contract every role service implements so the node runner can mount it (FL-1).

Live apply (FL-114..FL-116): an activated revision reaches each role in two steps. ``prepare``
builds what can fail (provider clients, ...) and mutates nothing, so a failure leaves the previous
epoch running (status ``error``); after the node swapped in the new company (``ctx.company``,
``ctx.resolved``, ``ctx.org``) ``apply`` puts the prepared parts to use and returns the stages it did.
Both may run before ``start`` (the boot's apply); ``start`` then picks up what ``apply`` left.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import APIRouter

from ._context import NodeContext

__all__ = ["CompanySnapshot", "RoleService"]


async def _nothing(ctx: NodeContext) -> None:
    return None


@dataclass(frozen=True)
class CompanySnapshot:
    """One applied company, immutable: what a turn pins (FL-116).

    Attributes:
        company: The document as written (``${NAME}`` verbatim).
        resolved: The document with secrets resolved (store first, then the environment; CO-5).
        org: The org model built from ``resolved``.
        epoch: The fleet's config epoch it was activated at.
        revision_id: Its revision.
        base_dir: Where relative offline-provider script paths resolve.
        secret_values: Every resolved secret value, for redaction; never logged.
    """

    company: Any
    resolved: Any
    org: Any
    epoch: int
    revision_id: str
    base_dir: Path
    secret_values: tuple[str, ...] = ()


PrepareHook = Callable[[NodeContext, CompanySnapshot], Awaitable[Any]]
ApplyHook = Callable[[NodeContext, CompanySnapshot, Any], Awaitable[list[str]]]
PostureHook = Callable[[NodeContext, str], Awaitable[None]]


@dataclass
class RoleService:
    """One role's mountable parts.

    Attributes:
        name: ``data``, ``ingress``, ``seats`` or ``workers``.
        router: The role's HTTP routes, or None (only ingress serves the API; FL-16).
        start: Boot work, awaited in role order ``data → ingress → seats → workers`` before the
            node reports ready. Starts the role's background loops.
        drain: Called on the first signal (FL-129), in reverse boot order: stop admitting new
            work and let running work finish. ``workers``, ``seats`` and ``ingress`` drain while the
            listener is open; ``data`` drains last, after the listener closed, so reads are served
            for the whole drain (crewlet/node.py says the order).
        stop: Called once every role of its group drained (the group without ``data``, then
            ``data`` alone): release what the role holds.
        prepare: ``await prepare(ctx, snapshot)`` before an epoch swap: build what can fail,
            mutate nothing; raising refuses the revision (status ``error``). Its return value is
            handed to ``apply``.
        apply: ``await apply(ctx, snapshot, prepared)`` after the swap; returns the stages done
            (FL-114 names). Raising reports the apply ``degraded``.
        on_posture: ``await on_posture(ctx, posture)`` when the node's posture changes (FL-113).
    """

    name: str
    router: APIRouter | None = None
    start: Callable[[NodeContext], Awaitable[None]] = field(default=_nothing)
    drain: Callable[[NodeContext], Awaitable[None]] = field(default=_nothing)
    stop: Callable[[NodeContext], Awaitable[None]] = field(default=_nothing)
    prepare: PrepareHook | None = None
    apply: ApplyHook | None = None
    on_posture: PostureHook | None = None
