"""The bus streams, created or adopted at boot (FL-76, FL-25, FL-28).

| Stream | Subjects | Retention | Age |
|---|---|---|---|
| ``CREWLET_AGENT`` | ``crewlet.agent.>`` | interest | — |
| ``CREWLET_NOTIFICATIONS`` | ``crewlet.notifications.>`` | interest | — |
| ``CREWLET_EVENTS`` | ``crewlet.events.>`` | limits | 30 days |
| ``CREWLET_CONFIG`` | ``crewlet.config.>`` | limits | 1 h |
| ``CREWLET_DLQ`` | ``dlq.>`` | limits | 30 days |
| ``CREWLET_CUSTODY`` | ``crewlet.custody.>`` | workqueue | 30 days |

Interest retention keeps a message only while a durable consumer that has not acked it exists,
and drops what is published to a subject no consumer covers (infra-facts S3): that is why every
seat's mailbox is created before anything publishes (FL-78). WorkQueue retention keeps a message
until its one consumer acks it, published before that consumer exists or not (the custody stream,
ES-78: :mod:`shared.bus._custody`). Replicas follow ``stream.replicas``.
An existing stream of another shape refuses the boot naming both values, like a bucket (FL-25);
while a create answers "no suitable peers" (10005) it is retried every 250 ms inside the budget.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig

from shared import logs

from ._errors import BusUnavailable, StreamMismatch

__all__ = ["AGENT_STREAM", "CUSTODY_STREAM", "DLQ_STREAM", "STREAMS", "StreamSpec", "provision_streams"]

_log = logs.get("bus.streams")
_NO_PEERS = 10005
_SLOW_AFTER = 10.0

AGENT_STREAM = "CREWLET_AGENT"
MAX_SEAT_CONSUMERS = 200_000
"""Consumers allowed on the inbox stream: two per seat, so up to 100 000 seats."""
DLQ_STREAM = "CREWLET_DLQ"
CUSTODY_STREAM = "CREWLET_CUSTODY"
"""Events of nodes without data awaiting a custodian (ES-78)."""


@dataclass(frozen=True)
class StreamSpec:
    """One bus stream.

    Attributes:
        name: The stream name.
        subjects: The subjects it captures.
        retention: ``interest``, ``limits`` or ``workqueue``.
        age: ``max_age``; None keeps messages until acked (interest) or limits apply.
        holds: What it carries (for operators).
        max_consumers: The stream's consumer limit; None for the server's default. Set on the
            inbox stream: nats-server caps a stream that sets none at 1 000 consumers (error
            10026), and every seat has two there (inbox and control), so a company of more than
            500 seats could not boot.
    """

    name: str
    subjects: tuple[str, ...]
    retention: Literal["interest", "limits", "workqueue"]
    age: timedelta | None
    holds: str
    max_consumers: int | None = None


STREAMS: tuple[StreamSpec, ...] = (
    StreamSpec(
        AGENT_STREAM,
        ("crewlet.agent.>",),
        "interest",
        None,
        "seat inboxes and control subjects",
        max_consumers=MAX_SEAT_CONSUMERS,
    ),
    StreamSpec(
        "CREWLET_NOTIFICATIONS",
        ("crewlet.notifications.>",),
        "interest",
        None,
        "inbound/outbound notifications",
    ),
    StreamSpec("CREWLET_EVENTS", ("crewlet.events.>",), "limits", timedelta(days=30), "telemetry events"),
    StreamSpec("CREWLET_CONFIG", ("crewlet.config.>",), "limits", timedelta(hours=1), "config nudges"),
    StreamSpec(DLQ_STREAM, ("dlq.>",), "limits", timedelta(days=30), "dead letters (event retention)"),
    StreamSpec(
        CUSTODY_STREAM,
        ("crewlet.custody.>",),
        "workqueue",
        timedelta(days=30),
        "events of nodes without data awaiting a custodian (ES-78)",
    ),
)
"""FL-76's streams that the bus owns (the memory changelog and namespaces are added by their users)."""

_RETENTION = {
    "interest": RetentionPolicy.INTEREST,
    "limits": RetentionPolicy.LIMITS,
    "workqueue": RetentionPolicy.WORK_QUEUE,
}


def _check(spec: StreamSpec, cfg: StreamConfig, replicas: int) -> None:
    have_ret = getattr(cfg.retention, "value", cfg.retention)
    if have_ret != spec.retention:
        raise StreamMismatch(
            f"stream {spec.name} exists with retention {have_ret} but crewlet needs {spec.retention}"
        )
    have_subjects = sorted(cfg.subjects or [])
    if have_subjects != sorted(spec.subjects):
        raise StreamMismatch(
            f"stream {spec.name} exists with subjects {have_subjects} but crewlet needs {sorted(spec.subjects)}"
        )
    have_r = int(cfg.num_replicas or 1)
    if have_r < replicas:
        raise StreamMismatch(
            f"stream {spec.name} exists with {have_r} replica(s) but stream.replicas is {replicas}: resize it "
            f"(nats stream update {spec.name} --replicas={replicas}) or set stream.replicas: {have_r}"
        )
    want_age = spec.age.total_seconds() if spec.age else 0.0
    have_age = float(cfg.max_age or 0.0)
    if abs(have_age - want_age) > 0.001:
        raise StreamMismatch(
            f"stream {spec.name} exists with max_age {have_age:g} s but crewlet needs {want_age:g} s"
        )


async def _ensure(js: JetStreamContext, spec: StreamSpec, *, replicas: int, budget: float) -> None:
    start = time.monotonic()
    awaiting = slow = False
    while True:
        try:
            info = await js.stream_info(spec.name)
            _check(spec, info.config, replicas)
            return
        except nats.js.errors.NotFoundError:
            pass
        except (
            nats.errors.TimeoutError,
            nats.js.errors.NoStreamResponseError,
            nats.errors.NoRespondersError,
        ):
            _log.warning("jetstream_stream_lookup_unanswered", stream=spec.name)
        try:
            await js.add_stream(
                StreamConfig(
                    name=spec.name,
                    description=spec.holds,
                    subjects=list(spec.subjects),
                    retention=_RETENTION[spec.retention],
                    max_age=spec.age.total_seconds() if spec.age else None,
                    storage=StorageType.FILE,
                    num_replicas=replicas,
                    max_consumers=spec.max_consumers,
                )
            )
            return
        except nats.js.errors.APIError as e:
            code = getattr(e, "err_code", None)
            if code == _NO_PEERS:
                if not awaiting:
                    _log.info("jetstream_stream_awaiting_peers", stream=spec.name, replicas=replicas)
                    awaiting = True
            elif code != 10058:  # 10058: created meanwhile by a peer with this or another shape: look again
                raise BusUnavailable(f"creating stream {spec.name}: {e}") from None
        except (
            nats.errors.TimeoutError,
            nats.js.errors.NoStreamResponseError,
            nats.errors.NoRespondersError,
        ):
            pass
        elapsed = time.monotonic() - start
        if elapsed > _SLOW_AFTER and not slow:
            _log.warning("jetstream_stream_slow", stream=spec.name, elapsed_ms=int(elapsed * 1000))
            slow = True
        if elapsed > budget:
            raise BusUnavailable(f"stream {spec.name} could not be created within {budget:.0f} s")
        await asyncio.sleep(0.25)


async def provision_streams(
    js: JetStreamContext,
    *,
    replicas: int = 1,
    budget: float | None = None,
    streams: Iterable[StreamSpec] = STREAMS,
) -> None:
    """Create or adopt the bus streams, concurrently (FL-76, FL-35-style idempotence).

    Args:
        js: The JetStream context of the process's one connection.
        replicas: ``stream.replicas`` (FL-25).
        budget: Seconds per create; default 30 s solo, 120 s with replicas (FL-28).
        streams: Which streams (default all of :data:`STREAMS`).

    Raises:
        StreamMismatch: an existing stream has another retention, subjects, age or fewer replicas.
        BusUnavailable: a stream could not be created within its budget.
    """
    per_create = budget if budget is not None else (120.0 if replicas > 1 else 30.0)
    await asyncio.gather(*(_ensure(js, s, replicas=replicas, budget=per_create) for s in streams))
