"""Creating or adopting every coordination bucket at boot (FL-25, FL-28, FL-29, FL-35).

Every node creates-or-adopts all buckets, concurrently safe: an existing bucket of the same shape
is a no-op. A booting node never rewrites an existing bucket: one at fewer replicas than
configured, or with another age, refuses the boot naming both values (FL-25). While a create
answers "no suitable peers" (10005: the other members have not arrived) it is retried every
250 ms inside the per-create budget and ``jetstream_stream_awaiting_peers`` is logged once; a
create still running after 10 s logs ``coord_kv_bucket_slow`` once.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from shared import logs

from ._buckets import BucketSpec, Slot, bucket_specs
from ._errors import BucketMismatch, CoordinationUnavailable
from ._nats import NatsCoordination

__all__ = ["provision"]

_log = logs.get("coord.kv")
_NO_PEERS = 10005
_SLOW_AFTER = 10.0


async def _ensure(js: JetStreamContext, spec: BucketSpec, *, replicas: int, budget: float) -> KeyValue:
    stream = f"KV_{spec.bucket}"
    want_age = spec.age.total_seconds() if spec.age is not None else 0.0
    start = time.monotonic()
    awaiting_logged = slow_logged = False
    while True:
        try:
            info = await js.stream_info(stream)
        except nats.js.errors.NotFoundError:
            info = None
        except (
            nats.errors.TimeoutError,
            nats.js.errors.NoStreamResponseError,
            nats.errors.NoRespondersError,
        ):
            info = None  # nobody said: fall through to the create; "already exists" is success (FL-29)
            _log.warning("coord_kv_bucket_lookup_unanswered", bucket=spec.bucket)
        if info is not None:
            have_r = int(info.config.num_replicas or 1)
            have_age = float(info.config.max_age or 0.0)
            if have_r < replicas:
                raise BucketMismatch(
                    f"bucket {spec.bucket} exists with {have_r} replica(s) but stream.replicas is {replicas}: resize "
                    f"it (nats stream update {stream} --replicas={replicas}) or set stream.replicas: {have_r}"
                )
            if abs(have_age - want_age) > 0.001:
                raise BucketMismatch(
                    f"bucket {spec.bucket} exists with age {have_age:g} s but this node wants {want_age:g} s "
                    f"(coordination.lease_ttl_seconds?): delete the bucket while no node runs, or use another "
                    f"coordination.bucket_prefix"
                )
            return await js.key_value(spec.bucket)
        try:
            return await js.create_key_value(
                KeyValueConfig(
                    bucket=spec.bucket,
                    description=spec.holds,
                    history=1,
                    ttl=want_age or None,
                    storage=StorageType.FILE,
                    replicas=replicas,
                )
            )
        except nats.js.errors.APIError as e:
            if getattr(e, "err_code", None) == _NO_PEERS:
                if not awaiting_logged:
                    _log.info("jetstream_stream_awaiting_peers", bucket=spec.bucket, replicas=replicas)
                    awaiting_logged = True
            elif getattr(e, "err_code", None) == 10058:  # created concurrently with another shape
                continue
            else:
                raise CoordinationUnavailable(f"creating bucket {spec.bucket}: {e}") from None
        except (nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError):
            pass
        elapsed = time.monotonic() - start
        if elapsed > _SLOW_AFTER and not slow_logged:
            _log.warning("coord_kv_bucket_slow", bucket=spec.bucket, elapsed_ms=int(elapsed * 1000))
            slow_logged = True
        if elapsed > budget:
            raise CoordinationUnavailable(f"bucket {spec.bucket} could not be created within {budget:.0f} s")
        await asyncio.sleep(0.25)


async def provision(
    js: JetStreamContext,
    *,
    prefix: str = "crewlet",
    replicas: int = 1,
    lease_ttl: timedelta = timedelta(seconds=45),
    budget: float | None = None,
) -> NatsCoordination:
    """Create or adopt every coordination bucket and return the store over them.

    Args:
        js: The JetStream context of the process's one connection.
        prefix: The bucket prefix (FL-34).
        replicas: ``stream.replicas`` (FL-25).
        lease_ttl: The lease TTL, the ``leases`` bucket's age.
        budget: Seconds for each create; default 30 s solo, 120 s with replicas (FL-28).

    Returns:
        The coordination store.

    Raises:
        BucketMismatch: an existing bucket has fewer replicas or another age (names both values).
        CoordinationUnavailable: a bucket could not be created within its budget.
    """
    per_create = budget if budget is not None else (120.0 if replicas > 1 else 30.0)
    specs = bucket_specs(prefix, lease_ttl=lease_ttl)
    kvs = await asyncio.gather(
        *(_ensure(js, s, replicas=replicas, budget=per_create) for s in specs.values())
    )
    buckets: dict[Slot, tuple[BucketSpec, KeyValue]] = {
        slot: (spec, kv) for (slot, spec), kv in zip(specs.items(), kvs, strict=True)
    }
    return NatsCoordination(js, buckets)
