"""One suite over both backends (ES-72, ES-73): round trips, streaming, refusals, verification."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator

import pytest

from shared import objects
from shared.errors import ServiceError, UsageError

from .conftest import Backend

MiB = 1024 * 1024


async def collect(it: AsyncIterator[bytes]) -> tuple[bytes, int]:
    """All bytes of a download, and the largest chunk it yielded."""
    out = bytearray()
    largest = 0
    async for chunk in it:
        out += chunk
        largest = max(largest, len(chunk))
    return bytes(out), largest


async def pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    """``data`` as an async iterator of ``size``-byte pieces (and one empty piece, which is ignored)."""
    yield b""
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def test_small_round_trip(backend: Backend) -> None:
    store = backend.store
    data = b"hello, lanternfish\n"
    info = await store.put("projects/demo/readme.md", data)
    assert info == objects.ObjectInfo("projects/demo/readme.md", len(data), hashlib.sha256(data).hexdigest())
    assert await store.head("projects/demo/readme.md") == info
    got, _ = await collect(await store.get("projects/demo/readme.md"))
    assert got == data
    assert store.kind == backend.kind
    assert store.identity()["type"] == backend.kind


async def test_20_mb_round_trips_byte_identical(backend: Backend) -> None:
    data = os.urandom(20 * MiB)
    key = "sha256/" + hashlib.sha256(data).hexdigest()
    info = await backend.store.put(key, data)
    assert (info.size, info.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    got, largest = await collect(await backend.store.get(key))
    assert got == data
    assert largest <= MiB  # streamed in chunks, never one buffer


async def test_streamed_upload_from_async_iterator(backend: Backend) -> None:
    # 9 MiB + 1 byte in odd-sized pieces: rechunked on nats, spooled then multipart on s3
    data = os.urandom(9 * MiB + 1)
    info = await backend.store.put("streamed.bin", pieces(data, 100_003))
    assert (info.size, info.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert await backend.store.head("streamed.bin") == info
    got, _ = await collect(await backend.store.get("streamed.bin"))
    assert got == data


async def test_overwrite_replaces_the_object(backend: Backend) -> None:
    await backend.store.put("doc", b"first version" * 30_000)
    info = await backend.store.put("doc", b"second")
    assert await backend.store.head("doc") == info
    got, _ = await collect(await backend.store.get("doc"))
    assert got == b"second"


async def test_empty_upload_is_refused(backend: Backend) -> None:
    with pytest.raises(objects.ObjectEmpty) as bytes_refusal:
        await backend.store.put("empty", b"")
    with pytest.raises(objects.ObjectEmpty):
        await backend.store.put("empty", pieces(b"", 10))
    assert isinstance(bytes_refusal.value, UsageError) and not bytes_refusal.value.retryable
    assert await backend.store.head("empty") is None


async def test_missing_key(backend: Backend) -> None:
    with pytest.raises(objects.ObjectNotFound) as missing:
        await backend.store.get("no/such/object")  # raised before any byte
    assert missing.value.key == "no/such/object" and not missing.value.retryable
    assert isinstance(missing.value, LookupError)
    assert await backend.store.head("no/such/object") is None
    assert await backend.store.delete("no/such/object") is False


async def test_delete(backend: Backend) -> None:
    await backend.store.put("gone", b"x" * 300_000)
    assert await backend.store.delete("gone") is True
    assert await backend.store.head("gone") is None
    with pytest.raises(objects.ObjectNotFound):
        await backend.store.get("gone")
    assert await backend.store.delete("gone") is False


async def test_tampered_object_fails_verification(backend: Backend) -> None:
    data = os.urandom(300_000)  # three chunks on nats
    info = await backend.store.put("tampered", data)
    await backend.tamper("tampered")
    assert await backend.store.head("tampered") == info  # the recorded size and digest are unchanged
    it = await backend.store.get("tampered")
    with pytest.raises(objects.ObjectCorrupt) as corrupt:
        await collect(it)
    assert corrupt.value.expected == (len(data), info.sha256)
    assert corrupt.value.actual[1] != info.sha256
    assert info.sha256 in str(corrupt.value) and not corrupt.value.retryable


async def test_invalid_keys_are_refused(backend: Backend) -> None:
    for key in ("", "a\x00b", "k" * 1025):
        with pytest.raises(objects.ObjectKeyInvalid):
            await backend.store.put(key, b"x")
        with pytest.raises(objects.ObjectKeyInvalid):
            await backend.store.head(key)


async def test_abandoned_download_can_be_closed(backend: Backend) -> None:
    await backend.store.put("partial", os.urandom(3 * MiB))
    it = await backend.store.get("partial")
    first = await anext(it)
    assert first
    await it.aclose()  # type: ignore[attr-defined]
    got, _ = await collect(await backend.store.get("partial"))  # the store still serves it
    assert len(got) == 3 * MiB


def test_error_tree() -> None:
    assert issubclass(objects.ObjectsError, ServiceError)
    for cls in (objects.ObjectEmpty, objects.ObjectKeyInvalid, objects.ObjectStoreMisconfigured):
        assert issubclass(cls, UsageError) and issubclass(cls, objects.ObjectsError)
        assert cls.retryable is False
    for other in (objects.ObjectNotFound, objects.ObjectCorrupt, objects.ObjectStoreMismatch):
        assert other.retryable is False
    assert objects.ObjectStoreUnavailable.retryable is True


def test_public_api_is_pinned() -> None:
    assert sorted(objects.__all__) == sorted(
        [
            "MAX_KEY_BYTES",
            "SLOT_KEY",
            "NatsObjectStore",
            "ObjectCorrupt",
            "ObjectEmpty",
            "ObjectInfo",
            "ObjectKeyInvalid",
            "ObjectNotFound",
            "ObjectStore",
            "ObjectStoreMismatch",
            "ObjectStoreMisconfigured",
            "ObjectStoreUnavailable",
            "ObjectsError",
            "S3ObjectStore",
            "claim_objects_slot",
            "describe",
            "open_object_store",
        ]
    )
    for name in objects.__all__:
        assert hasattr(objects, name)
