"""The ``objects`` coordination slot (ES-71, FL-5): the first node records, a different store refuses."""

from __future__ import annotations

import json
import uuid

import pytest

from shared import coordination, objects
from shared.broker import BrokerLink
from tests.support.seaweed import SeaweedS3

from .conftest import make_cfg


async def open_nats(link: BrokerLink, bucket: str) -> objects.ObjectStore:
    return await objects.open_object_store(make_cfg({"type": "nats", "bucket": bucket}), link)


async def test_first_claim_records_and_the_same_store_passes(link: BrokerLink) -> None:
    coord = await coordination.provision(link.js)
    store = await open_nats(link, "crewlet-files")
    await objects.claim_objects_slot(coord, store)
    entry = await coord.get("objects", objects.SLOT_KEY)
    assert entry is not None
    assert json.loads(entry.value) == {"type": "nats", "bucket": "crewlet-files"}
    again = await open_nats(link, "crewlet-files")  # a second node with the same block
    await objects.claim_objects_slot(coord, again)
    assert (await coord.get("objects", objects.SLOT_KEY)) == entry  # not rewritten


async def test_another_bucket_refuses_naming_both(link: BrokerLink) -> None:
    coord = await coordination.provision(link.js)
    await objects.claim_objects_slot(coord, await open_nats(link, "crewlet-files"))
    with pytest.raises(objects.ObjectStoreMismatch) as refused:
        await objects.claim_objects_slot(coord, await open_nats(link, "other-files"))
    message = str(refused.value)
    assert "nats bucket crewlet-files" in message and "nats bucket other-files" in message
    assert message.index("crewlet-files") < message.index("other-files")  # recorded first
    assert not refused.value.retryable


async def test_another_backend_refuses_naming_both(
    link: BrokerLink, seaweed: SeaweedS3, aws_env: None
) -> None:
    coord = await coordination.provision(link.js)
    await objects.claim_objects_slot(coord, await open_nats(link, "crewlet-files"))
    bucket = f"slot-{uuid.uuid4().hex[:10]}"
    s3 = await objects.open_object_store(
        make_cfg({"type": "s3", "bucket": bucket, "endpoint_url": seaweed.endpoint_url}), None
    )
    try:
        with pytest.raises(objects.ObjectStoreMismatch) as refused:
            await objects.claim_objects_slot(coord, s3)
    finally:
        await s3.close()
    message = str(refused.value)
    assert "nats bucket crewlet-files" in message
    assert f"s3 bucket {bucket} at {seaweed.endpoint_url}" in message


async def test_claim_on_an_unreachable_store_is_unknown() -> None:
    store = objects.NatsObjectStore(None, "crewlet-files")  # type: ignore[arg-type]
    with pytest.raises(coordination.CoordinationUnavailable):
        await objects.claim_objects_slot(coordination.FaultyCoordination(), store)


async def test_claim_on_the_local_store() -> None:
    coord = coordination.MemoryCoordination()
    first = objects.NatsObjectStore(None, "a")  # type: ignore[arg-type]
    await objects.claim_objects_slot(coord, first)
    with pytest.raises(objects.ObjectStoreMismatch, match="nats bucket a .*nats bucket b"):
        await objects.claim_objects_slot(coord, objects.NatsObjectStore(None, "b"))  # type: ignore[arg-type]
