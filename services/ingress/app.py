"""The ``ingress`` role: the HTTP API — webhooks, messages, REST reads, the fleet view (FL-15, CO-27).

Triggers are published into seat inboxes through the bus the node runner opened
(``ctx.extras["bus"]``), with the receiving span's trace context in the headers (CO-21).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from shared import telemetry
from shared.bus import Bus, Envelope
from shared.runtime import NodeContext, RoleService, api_error

from . import ui
from .api.routes import (
    backup,
    broker,
    budgets,
    config,
    estate,
    events,
    files,
    fleet,
    github,
    knowledge,
    memory,
    messages,
    objects,
    retention,
    schedules,
    secrets,
    turns,
    usage,
    webhooks,
    work,
)
from .triggers import TriggerPublisher

__all__ = ["service"]


def service(ctx: NodeContext) -> RoleService:
    """Build the ingress role for ``ctx``: its router and lifespan work."""

    async def publish(handle: str, envelope: dict[str, Any], msg_id: str, headers: dict[str, str]) -> bool:
        bus = ctx.extras.get("bus")
        if not isinstance(bus, Bus):
            raise api_error(503, "not_ready", "the node's bus is not open yet", headers={"Retry-After": "5"})
        stored = await bus.publish_to_seat(
            handle, Envelope.model_validate(envelope), msg_id=msg_id, headers=headers
        )
        return stored.duplicate

    publisher = TriggerPublisher(publish, telemetry.inject)
    api = APIRouter()
    # the webhook routes first: a request is matched against the routes in order, and these take
    # the volume (no other route's path overlaps theirs, so the order decides nothing else)
    api.include_router(webhooks.router(ctx, publisher))
    api.include_router(github.router(ctx, publisher))
    api.include_router(fleet.router(ctx))
    api.include_router(broker.router(ctx))
    api.include_router(config.router(ctx))
    api.include_router(messages.router(ctx, publisher))
    api.include_router(turns.router(ctx))
    api.include_router(usage.router(ctx))  # AG-48: every node's usage days, summed
    api.include_router(work.router(ctx))
    api.include_router(knowledge.router(ctx))
    api.include_router(files.router(ctx))
    api.include_router(events.router(ctx))
    api.include_router(backup.router(ctx))
    api.include_router(estate.router(ctx))
    api.include_router(secrets.router(ctx))
    api.include_router(retention.router(ctx))
    api.include_router(budgets.router(ctx))
    api.include_router(memory.router(ctx))  # AG-9: GET /agents/{handle}/memory
    api.include_router(schedules.router(ctx))
    api.include_router(objects.router(ctx))  # ES-75: the collector's findings (GET /objects)
    api.include_router(ui.router(ctx))  # the operator UI at /ui/ (DESIGN.md "Operator UI")

    return RoleService(name="ingress", router=api)
