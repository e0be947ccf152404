"""What a node runs: the seed and import revisions and the reconciler that applies them (FL-106..FL-116).

Boot step 5 of :mod:`crewlet.node`: :func:`open_control` builds the reconciler with the node's apply
(:class:`crewlet.apply.NodeApplier`), posture and event hooks; :func:`subscribe_nudge` listens for the
``revision_activated`` broadcast (FL-108) once the roles have started.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from datetime import timedelta
from typing import Any

from shared import control, coordination, logs
from shared.runtime import NodeContext, RoleService

from .apply import NodeApplier
from .custody import emit_event

__all__ = ["forced_revision", "open_control", "seed_revision", "subscribe_nudge"]

_log = logs.get("node")


def seed_revision(company: Any) -> control.Revision:
    """The revision a node's ``--company`` file seeds (CO-4, FL-109): content-derived id, source ``seed``."""
    document = company.model_dump(mode="json", exclude_unset=True)
    return control.Revision(
        revision_id=control.seed_revision_id(document),
        document=document,
        summary="seeded from the node's --company file",
        source="seed",
        created_by="not recorded",
        created_by_kind="system",
    )


def forced_revision(company: Any, node_id: str) -> control.Revision:
    document = company.model_dump(mode="json", exclude_unset=True)
    return control.Revision(
        revision_id=control.new_revision_id(),
        document=document,
        summary="imported by --import-company",
        source="import",
        created_by=node_id,
        created_by_kind="operator",
    )


async def open_control(ctx: NodeContext, roles: list[RoleService], presence: Any) -> control.Reconciler:
    """Build this node's reconciler (FL-106..FL-116) with the node's apply, posture and event hooks."""
    assert ctx.coord is not None
    cfg = ctx.cfg
    store = control.ControlStore(ctx.coord, ctx.extras["keyring"])

    async def on_posture(new: str, old: str) -> None:
        ctx.extras["posture"] = new
        ctx.extras["config_error"] = reconciler.error
        ctx.extras["config_target_epoch"] = reconciler.target
        for role in roles:
            if role.on_posture is not None:
                await role.on_posture(ctx, new)
        if presence is not None and presence.held:  # peers stop counting a shedding node now
            with contextlib.suppress(coordination.CoordinationUnavailable):
                await presence.renew()

    def on_event(data: dict[str, Any]) -> None:
        ctx.extras["config_error"] = reconciler.error
        emit_event(  # its own log on a data node, custody elsewhere (ES-77, ES-78)
            ctx,
            {
                "event_time": int(time.time() * 1_000_000),
                "event_id": str(uuid.uuid4()),
                "event_type": "config_revision_applied",
                "source": ctx.node_id,
                "category": "config",
                "data": data,
            },
        )

    reconciler = control.Reconciler(
        store,
        ctx.coord,
        node_id=ctx.node_id,
        apply=NodeApplier(ctx, roles),
        interval=coordination.reconcile_interval(
            timedelta(seconds=cfg.coordination.lease_ttl_seconds)
        ).total_seconds(),
        on_posture=on_posture,
        on_event=on_event,
        local=None if cfg.store.scratch else control.LocalRecord(cfg.store_dir),
    )
    ctx.extras["control"] = reconciler
    return reconciler


async def subscribe_nudge(ctx: NodeContext, reconciler: control.Reconciler) -> Any:
    """Subscribe to the activation broadcast (FL-108); a failure is logged, never fatal.

    ``CREWLET_CONFIG_NUDGE=off`` leaves the subscription out (the poll alone converges, within one
    jittered interval): for diagnosing the poll path.
    """
    if os.environ.get("CREWLET_CONFIG_NUDGE", "").lower() in ("off", "0", "false"):
        _log.warning("config_nudge_disabled", detail="CREWLET_CONFIG_NUDGE=off: the poll alone applies")
        return None
    if ctx.link is None:
        return None

    async def on_nudge(msg: Any) -> None:
        reconciler.nudge()

    try:
        return await ctx.link.nc.subscribe(control.REVISION_ACTIVATED_SUBJECT, cb=on_nudge)
    except Exception as e:  # noqa: BLE001 - FL-108: logged, not fatal
        _log.warning("config_nudge_subscribe_failed", error=f"{type(e).__name__}: {e}")
        return None
