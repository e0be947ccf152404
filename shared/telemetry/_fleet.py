"""The fleet series' names, help and labels (FL-6, FL-117): the table the fleet collector fills.

The collector itself (:class:`crewlet._fleet_metrics.FleetCollector`) reads the lease store, the
``crewlet_status`` rows, the estate and the bus, so it sits in the node's composition, above the
packages it reads; the names live here with the other series and span names, so dashboards, alert
rules and tests can name them without a node.

Series (labels are closed sets: node ids, seat handles, duty names, domains; no ids of events):

- ``crewlet_fleet_view_readable`` 1 when the lease store answered the last refresh, else 0 (and
  the per-node series below are absent rather than stale);
- ``crewlet_node_info{node, roles, broker_kind, protocol, posture}`` 1 per live node; ``roles`` is
  the sorted comma-joined role set;
- ``crewlet_node_config_epoch{node}`` the config epoch the node reported (FL-117), else the one its
  presence lease carries; ``crewlet_node_seats_held{node}``; ``crewlet_node_turns_in_flight{node}``;
- ``crewlet_seat_epoch{seat, node}`` the lease epoch of each owned seat, labelled by its owner node;
- ``crewlet_duty_holder{duty, node}`` 1 per held duty;
- this node's estate copy (data role; ES-24, FL-154 ``apply_lag``):
  ``crewlet_estate_apply_lag_records{node, domain}`` records on the log not yet applied, and
  ``crewlet_estate_apply_behind_seconds{node, domain}`` how long the copy has been behind (0 when
  caught up);
- mailboxes of the seats held here: ``crewlet_mailbox_pending_messages{node, seat}`` (JetStream
  ``num_pending``) and ``crewlet_mailbox_ack_pending_messages{node, seat}`` (``num_ack_pending``).
"""

from __future__ import annotations

__all__ = ["FLEET_SERIES"]

FLEET_SERIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "crewlet_fleet_view_readable": ("1 when the lease store answered the last refresh, else 0.", ()),
    "crewlet_node_info": (
        "A live node as its presence lease says (FL-117); value 1.",
        ("node", "roles", "broker_kind", "protocol", "posture"),
    ),
    "crewlet_node_config_epoch": ("The config epoch the node applied (FL-117).", ("node",)),
    "crewlet_node_seats_held": ("Seats the node holds.", ("node",)),
    "crewlet_node_turns_in_flight": ("Turns the node is running now.", ("node",)),
    "crewlet_seat_epoch": ("The lease epoch of an owned seat, by owner node.", ("seat", "node")),
    "crewlet_duty_holder": ("1 for the node holding a duty.", ("duty", "node")),
    "crewlet_estate_apply_lag_records": (
        "Records on the state log this node's copy has not applied (ES-24).",
        ("node", "domain"),
    ),
    "crewlet_estate_apply_behind_seconds": (
        "Seconds this node's copy has been behind the log; 0 when caught up (ES-24).",
        ("node", "domain"),
    ),
    "crewlet_mailbox_pending_messages": (
        "Messages in a held seat's inbox not yet delivered (JetStream num_pending).",
        ("node", "seat"),
    ),
    "crewlet_mailbox_ack_pending_messages": (
        "Messages delivered to a held seat and not yet acked (num_ack_pending).",
        ("node", "seat"),
    ),
}
"""Every series of this collector: name → (help, label names)."""
