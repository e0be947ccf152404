"""The s3 backend's own promises (ES-73, FL-5) against a real SeaweedFS."""

from __future__ import annotations

import hashlib
import os
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from shared import objects
from tests.support.procs import free_port
from tests.support.seaweed import SeaweedS3

from .conftest import make_cfg, sha_b64

MiB = 1024 * 1024


@pytest.fixture
async def s3(seaweed: SeaweedS3, aws_env: None) -> AsyncIterator[objects.S3ObjectStore]:
    cfg = make_cfg(
        {"type": "s3", "bucket": f"s3t-{uuid.uuid4().hex[:10]}", "endpoint_url": seaweed.endpoint_url}
    )
    store = await objects.open_object_store(cfg, None)
    assert isinstance(store, objects.S3ObjectStore)
    try:
        yield store
    finally:
        await store.close()


async def test_digest_is_sent_as_checksum_and_kept_as_metadata(
    s3: objects.S3ObjectStore, seaweed: SeaweedS3
) -> None:
    raw = seaweed.client()
    try:
        small = os.urandom(100_000)
        info = await s3.put("small", small)
        head = raw.head_object(Bucket=s3.bucket, Key="small", ChecksumMode="ENABLED")
        assert head["Metadata"] == {"sha256": info.sha256, "size": "100000"}
        assert head["ChecksumSHA256"] == sha_b64(info.sha256)  # the server checked our digest
        big = os.urandom(17 * MiB)  # multipart: the object's own checksum is composite
        info = await s3.put("big", big)
        head = raw.head_object(Bucket=s3.bucket, Key="big")
        assert head["Metadata"] == {"sha256": hashlib.sha256(big).hexdigest(), "size": str(len(big))}
        assert head["ContentLength"] == len(big)
    finally:
        raw.close()


async def test_boto3_runs_off_the_event_loop(s3: objects.S3ObjectStore) -> None:
    threads: list[str] = []
    client: Any = s3._client
    for name in ("put_object", "get_object", "head_object", "delete_object", "upload_fileobj"):
        real = getattr(client, name)

        def spy(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            threads.append(threading.current_thread().name)
            return _real(*args, **kwargs)

        setattr(client, name, spy)
    await s3.put("k", b"v")
    await s3.put("multi", os.urandom(9 * MiB))
    async for _ in await s3.get("k"):
        pass
    await s3.head("k")
    await s3.delete("k")
    assert len(threads) == 6
    assert all(name.startswith("crewlet-s3") for name in threads), threads


async def test_bucket_is_created_once_and_adopted(seaweed: SeaweedS3, aws_env: None) -> None:
    bucket = f"adopt-{uuid.uuid4().hex[:10]}"
    cfg = make_cfg({"type": "s3", "bucket": bucket, "endpoint_url": seaweed.endpoint_url + "/"})
    first = await objects.open_object_store(cfg, None)
    second = await objects.open_object_store(cfg, None)
    try:
        await first.put("x", b"1")
        assert await second.head("x") == objects.ObjectInfo("x", 1, hashlib.sha256(b"1").hexdigest())
        assert first.identity() == {"type": "s3", "endpoint_url": seaweed.endpoint_url, "bucket": bucket}
    finally:
        await first.close()
        await second.close()


async def test_head_reports_the_stored_size(s3: objects.S3ObjectStore, seaweed: SeaweedS3) -> None:
    """The collector (ES-75) compares head() with the file row: a rewritten object shows its real size."""
    info = await s3.put("resized", b"0123456789")
    raw = seaweed.client()
    try:
        kept = raw.head_object(Bucket=s3.bucket, Key="resized")["Metadata"]
        raw.put_object(Bucket=s3.bucket, Key="resized", Body=b"012", Metadata=kept)
    finally:
        raw.close()
    assert await s3.head("resized") == objects.ObjectInfo("resized", 3, info.sha256)
    with pytest.raises(objects.ObjectCorrupt, match="size and digest mismatch") as corrupt:
        async for _ in await s3.get("resized"):
            pass
    assert corrupt.value.expected == (10, info.sha256) and corrupt.value.actual[0] == 3


async def test_object_without_recorded_digest_fails_verification(
    s3: objects.S3ObjectStore, seaweed: SeaweedS3
) -> None:
    raw = seaweed.client()
    try:
        raw.put_object(Bucket=s3.bucket, Key="foreign", Body=b"no digest recorded")
    finally:
        raw.close()
    assert await s3.head("foreign") == objects.ObjectInfo("foreign", 18, "")
    with pytest.raises(objects.ObjectCorrupt, match="sha256 \\(none\\)"):
        async for _ in await s3.get("foreign"):
            pass


async def test_unreachable_endpoint_is_unavailable(aws_env: None) -> None:
    cfg = make_cfg({"type": "s3", "bucket": "nowhere", "endpoint_url": f"http://127.0.0.1:{free_port()}"})
    with pytest.raises(objects.ObjectStoreUnavailable, match="not reachable") as unreachable:
        await objects.open_object_store(cfg, None, budget=0)
    assert unreachable.value.retryable
