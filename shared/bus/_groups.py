"""Fleet-wide consumer groups and whether their handlers need the ``data`` role (FL-86, ES-78).

A fleet-wide group is one durable consumer that any node may pull from (whoever fetches first gets
the message), unlike a seat's mailbox (one lease holder) or an applier (one node's own durable).
Every such group is declared once in :data:`GROUPS` with a needs-data flag, and joined only through
:func:`attach_group`, which refuses a node without ``data`` a group that needs it and refuses every
node an undeclared group (``fleet_group_undeclared``; it is joined nowhere).

| group | stream | needs data | why |
|---|---|---|---|
| ``crewlet-custody`` | ``CREWLET_CUSTODY`` | yes | writes a stateless node's events into a data node's event log (ES-78) |
| ``crewlet-reflect`` | ``CREWLET_EVENTS`` | no | turns each settled turn into memory rows through the router (AG-6) |

The other groups FL-86 names are not built here, so they are not declared: nothing consumes
``crewlet.notifications.inbound`` (webhooks wake seats through their mailboxes), and no wake
feed reads the state logs (the trim's ``feed_ack_floor`` is ``n/a``,
:mod:`shared.estate.life._trim`). A unit test holds this table against the code in both directions:
every :func:`attach_group` call names a declared group, every declared group is attached somewhere,
and no other module creates a shared durable outside the per-seat and per-node ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from shared import logs

from ._delivery import add_consumer, translate
from ._streams import CUSTODY_STREAM

__all__ = ["CUSTODY_GROUP", "GROUPS", "REFLECT_GROUP", "FleetGroup", "attach_group", "may_join"]

_log = logs.get("bus.groups")

CUSTODY_GROUP = "crewlet-custody"
"""The custody group's durable name (ES-78): data nodes only."""
REFLECT_GROUP = "crewlet-reflect"
"""The reflect dispatcher's durable name (AG-6): every node."""


@dataclass(frozen=True)
class FleetGroup:
    """One fleet-wide consumer group (FL-86).

    Attributes:
        name: The durable consumer's name (no dots).
        stream: The stream it reads.
        subject: Its filter subject.
        needs_data: True when its handler writes or reads this node's estate copy or event log.
        holds: What it carries (for operators).
        ack_wait: Seconds a fetched message stays with one member before another may take it.
    """

    name: str
    stream: str
    subject: str
    needs_data: bool
    holds: str
    ack_wait: float = 30.0


GROUPS: dict[str, FleetGroup] = {
    g.name: g
    for g in (
        FleetGroup(
            CUSTODY_GROUP,
            CUSTODY_STREAM,
            "crewlet.custody.>",
            needs_data=True,
            holds="events of nodes without data, written into one data node's event log (ES-78)",
        ),
        FleetGroup(
            REFLECT_GROUP,
            "CREWLET_EVENTS",
            "crewlet.events.agent_turn_completed",
            needs_data=False,
            holds="settled turns, each reflected once into the seat's memory (AG-6)",
            ack_wait=120.0,
        ),
    )
}
"""Every fleet-wide consumer group, by durable name (FL-86)."""


def may_join(name: str, *, has_data: bool) -> bool:
    """Return whether a node may join group ``name`` (FL-86).

    Args:
        name: The group's durable name.
        has_data: Whether the asking node runs the ``data`` role.

    Returns:
        False for an undeclared group (logged ``fleet_group_undeclared``; joined nowhere) and for a
        group that needs data on a node without it (logged ``fleet_group_not_joined``); else True.
    """
    group = GROUPS.get(name)
    if group is None:
        _log.error("fleet_group_undeclared", group=name, detail="declare it in shared/bus/_groups.py GROUPS")
        return False
    if group.needs_data and not has_data:
        _log.info("fleet_group_not_joined", group=name, reason="needs the data role")
        return False
    return True


async def attach_group(
    js: JetStreamContext, name: str, *, has_data: bool, budget: float = 30.0
) -> Any | None:
    """Create (or adopt) group ``name``'s durable and bind a pull subscription to it (FL-86).

    The durable inherits the stream's replicas (WorkQueue and Interest streams need consumer
    replicas equal to the stream's, infra-facts S2); it is one durable for the whole fleet, so the
    create is paid once.

    Args:
        js: The node's JetStream context.
        name: A group of :data:`GROUPS`.
        has_data: Whether this node runs ``data``.
        budget: Seconds to keep retrying a create the broker does not answer.

    Returns:
        The pull subscription, or None when this node may not join (:func:`may_join`).

    Raises:
        BusUnavailable: the broker did not answer within ``budget`` or refused the create.
    """
    if not may_join(name, has_data=has_data):
        return None
    group = GROUPS[name]
    config = ConsumerConfig(
        durable_name=group.name,
        description=group.holds,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=group.ack_wait,
        max_deliver=-1,
        filter_subject=group.subject,
    )
    what = f"join group {group.name}"
    await add_consumer(js, group.stream, config, what=what, budget=budget)
    try:
        psub = await js.pull_subscribe_bind(durable=group.name, stream=group.stream)
    except Exception as e:  # noqa: BLE001 - the seam's error, naming the group
        raise translate(e, what, write=False) from None
    _log.info("fleet_group_joined", group=group.name, stream=group.stream)
    return psub
