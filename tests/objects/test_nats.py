"""The nats backend's own promises (ES-72, infra-facts N8, FL-25)."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import nats.js.object_store
import pytest
from nats.js import JetStreamContext

from shared import objects
from shared.broker import BrokerLink
from shared.objects import _nats

from .conftest import make_cfg

MiB = 1024 * 1024


async def open_nats(link: BrokerLink, bucket: str = "files", **stream: Any) -> objects.NatsObjectStore:
    cfg = make_cfg({"type": "nats", "bucket": bucket}, stream={"type": "nats", "url": link.url, **stream})
    store = await objects.open_object_store(cfg, link)
    assert isinstance(store, objects.NatsObjectStore)
    return store


async def chunk_subject(js: JetStreamContext, store: objects.NatsObjectStore, key: str) -> str:
    meta = await js.get_last_msg(store.stream, store._meta_subject(key))
    return store._chunk_subject(json.loads(meta.data or b"{}")["nuid"])


async def read_all(store: objects.ObjectStore, key: str) -> bytes:
    out = bytearray()
    async for chunk in await store.get(key):
        out += chunk
    return bytes(out)


async def test_large_reads_go_through_a_pull_consumer(
    link: BrokerLink, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 5 MB read never touches nats-py's ObjectStore.get nor any push subscription (N8's stall)."""
    store = await open_nats(link)
    data = os.urandom(5 * MiB)
    await store.put("big", data)

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the stalling read path was used")

    binds: list[str] = []
    real_bind = JetStreamContext.pull_subscribe_bind

    async def spy_bind(self: JetStreamContext, *args: Any, **kwargs: Any) -> Any:
        binds.append(str(args[0] if args else kwargs.get("consumer")))
        return await real_bind(self, *args, **kwargs)

    monkeypatch.setattr(nats.js.object_store.ObjectStore, "get", forbidden)
    monkeypatch.setattr(JetStreamContext, "subscribe", forbidden)
    monkeypatch.setattr(JetStreamContext, "pull_subscribe_bind", spy_bind)
    it = await store.get("big")
    assert it.__qualname__ == _nats._read_chunks.__qualname__  # type: ignore[attr-defined]
    got = bytearray()
    async for chunk in it:
        assert len(chunk) == _nats.CHUNK_SIZE or len(got) + len(chunk) == len(data)
        got += chunk
    assert bytes(got) == data
    assert len(binds) == 1 and binds[0].startswith("crewlet-read-")
    info = await link.js.stream_info(store.stream)
    assert info.state.consumer_count == 0  # the reader removed its consumer


async def test_ten_mib_is_eighty_chunk_messages(link: BrokerLink) -> None:
    store = await open_nats(link)
    data = os.urandom(10 * MiB)
    await store.put("ten", data)
    subject = await chunk_subject(link.js, store, "ten")
    info = await link.js.stream_info(store.stream, subjects_filter=subject)
    assert info.state.subjects == {subject: 80}
    assert await read_all(store, "ten") == data


async def test_missing_chunk_is_a_size_mismatch(link: BrokerLink) -> None:
    store = await open_nats(link)
    data = os.urandom(400_000)  # 4 chunks
    info = await store.put("short", data)
    subject = await chunk_subject(link.js, store, "short")
    last = await link.js.get_last_msg(store.stream, subject)
    assert last.seq is not None
    await link.js.delete_msg(store.stream, last.seq)
    with pytest.raises(objects.ObjectCorrupt) as corrupt:
        await read_all(store, "short")
    assert corrupt.value.expected == (len(data), info.sha256)
    assert corrupt.value.actual[0] == len(data) - len(last.data or b"")
    assert "size and digest mismatch" in str(corrupt.value)


async def test_surplus_chunk_is_refused(link: BrokerLink) -> None:
    store = await open_nats(link)
    await store.put("long", b"a" * 1000)
    await link.js.publish(await chunk_subject(link.js, store, "long"), b"extra")
    with pytest.raises(objects.ObjectCorrupt, match="more bytes than recorded"):
        await read_all(store, "long")


async def test_nats_py_reads_our_objects(link: BrokerLink) -> None:
    """The layout is the standard one: nats-py's own reader verifies our digest."""
    store = await open_nats(link)
    data = os.urandom(MiB + 5)
    await store.put("compat/file.bin", data)
    theirs = await link.js.object_store("files")
    result = await theirs.get("compat/file.bin")
    assert result.data == data
    assert result.info.size == len(data) and result.info.chunks == 9


async def test_objects_written_by_nats_py_have_a_digest(link: BrokerLink) -> None:
    store = await open_nats(link)
    theirs = await link.js.object_store("files")
    await theirs.put("foreign", b"written by another client")
    head = await store.head("foreign")
    assert head == objects.ObjectInfo("foreign", 25, hashlib.sha256(b"written by another client").hexdigest())
    assert await read_all(store, "foreign") == b"written by another client"


async def test_overwrite_and_delete_purge_chunks(link: BrokerLink) -> None:
    store = await open_nats(link)
    await store.put("doc", os.urandom(500_000))  # 4 chunks
    await store.put("doc", b"short")  # 1 chunk; the old 4 are purged
    info = await link.js.stream_info(store.stream)
    assert info.state.messages == 2  # one chunk + one meta
    assert await store.delete("doc") is True
    info = await link.js.stream_info(store.stream)
    assert info.state.messages == 1  # the deleted meta (a tombstone) only


async def test_bucket_follows_stream_replicas_and_is_adopted(link: BrokerLink) -> None:
    first = await open_nats(link)
    second = await open_nats(link)  # adopted, not rewritten
    info = await link.js.stream_info(first.stream)
    assert info.config.num_replicas == 1
    assert first.identity() == second.identity() == {"type": "nats", "bucket": "files"}


async def test_bucket_below_configured_replicas_refuses(link: BrokerLink) -> None:
    await open_nats(link)
    with pytest.raises(objects.ObjectStoreMismatch) as refused:
        await open_nats(link, replicas=3)
    assert "1 replica" in str(refused.value) and "stream.replicas is 3" in str(refused.value)


async def test_misconfigured_nats_store(link: BrokerLink) -> None:
    with pytest.raises(objects.ObjectStoreMisconfigured, match="broker connection"):
        await objects.open_object_store(make_cfg({"type": "nats", "bucket": "files"}), None)
    with pytest.raises(objects.ObjectStoreMisconfigured, match="my.files"):
        await open_nats(link, bucket="my.files")


async def test_foreign_empty_object_reads_empty(link: BrokerLink) -> None:
    """We refuse empty uploads, but another client may write one: it reads as nothing, verified."""
    store = await open_nats(link)
    theirs = await link.js.object_store("files")
    await theirs.put("empty", b"")
    assert await store.head("empty") == objects.ObjectInfo("empty", 0, hashlib.sha256(b"").hexdigest())
    assert await read_all(store, "empty") == b""


async def test_abandoned_read_removes_its_consumer(link: BrokerLink) -> None:
    store = await open_nats(link)
    await store.put("big", os.urandom(3 * MiB))
    it = await store.get("big")
    assert len(await anext(it)) == _nats.CHUNK_SIZE
    assert (await link.js.stream_info(store.stream)).state.consumer_count == 1  # reading, a window ahead
    await it.aclose()  # type: ignore[attr-defined]
    assert (await link.js.stream_info(store.stream)).state.consumer_count == 0
