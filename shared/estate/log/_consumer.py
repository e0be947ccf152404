"""The applier's durable consumer: its name, its configuration and how it is judged (ES-17, ES-90).

A consumer whose acknowledged floor disagrees with the checkpoint in the rows is rebuilt at the
checkpoint (resume from rows, never from the reader); rows keyed to another log than the broker's
stop the applier.
"""

from __future__ import annotations

import hashlib

from nats.js import api as jsapi

__all__ = ["consumer_config", "consumer_drift", "consumer_name", "log_mismatch"]


def consumer_name(domain: str, node_id: str) -> str:
    """Return the applier's durable name: ``crewlet-applier-<domain>-<node>-<6 hex>`` (no dots)."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in node_id)
    return f"crewlet-applier-{domain}-{safe}-{hashlib.sha256(node_id.encode()).hexdigest()[:6]}"


def consumer_drift(info: jsapi.ConsumerInfo | None, applied: int) -> tuple[str, int, int]:
    """Return ``(drift, acked, delivered)`` of a consumer against the checkpoint ``applied`` (ES-17).

    ``drift`` is ``acknowledged_past_checkpoint``, ``behind_checkpoint``, ``in_flight_for_a_gone_reader``,
    ``delivered_past_checkpoint``, or ``""`` when the consumer agrees (or there is none).
    """
    if info is None:
        return "", 0, 0
    acked = int(info.ack_floor.stream_seq or 0) if info.ack_floor else 0
    delivered = int(info.delivered.stream_seq or 0) if info.delivered else 0
    drift = ""
    if acked > applied:
        drift = "acknowledged_past_checkpoint"
    elif acked < applied:
        drift = "behind_checkpoint"
    elif (info.num_ack_pending or 0) > 0:
        drift = "in_flight_for_a_gone_reader"
    elif delivered > acked:
        drift = "delivered_past_checkpoint"
    return drift, acked, delivered


def consumer_config(durable: str, applied: int) -> jsapi.ConsumerConfig:
    """The durable pull consumer of an applier whose checkpoint is ``applied``: AckAll, from the next record."""
    start = applied + 1
    return jsapi.ConsumerConfig(
        durable_name=durable,
        ack_policy=jsapi.AckPolicy.ALL,
        deliver_policy=jsapi.DeliverPolicy.BY_START_SEQUENCE if start > 1 else jsapi.DeliverPolicy.ALL,
        opt_start_seq=start if start > 1 else None,
        ack_wait=30.0,
        max_ack_pending=20_000,
    )


def log_mismatch(seq: int, created_at: int, stream_created_at: int, last: int) -> tuple[str, str] | None:
    """Why the rows at checkpoint ``seq`` are keyed to another log than the one the broker holds (ES-90),
    as ``(event, reason)``, or None when they are not.

    Two cases, both seen after a restore onto a broker that lost its streams (an embedded
    node's lost disk): the stream's creation instant is not the one the checkpoint names
    (``statelog_stream_recreated``), or the checkpoint is past the log's last record
    (``statelog_ahead_of_log``). Applying on would skip every new record up to the old
    checkpoint as "already applied", so writes would be acknowledged and then lost; the copy
    refuses instead, naming both positions, until an operator restores the log with the rows
    (README, "Restore from a backup") or starts the copy afresh. An unreadable stream decides
    nothing here (the loop's reader errors say so).
    """
    if created_at and stream_created_at and created_at != stream_created_at:
        event, reason = "statelog_stream_recreated", "the log was recreated since these rows were applied"
    elif last < seq:
        event, reason = "statelog_ahead_of_log", "the checkpoint is past the log's last record"
    else:
        return None
    return event, reason
