"""The nats backend: a JetStream object-store bucket on the process's one connection (ES-72).

Layout is nats-py's and the Go client's (so ``nats object`` tools read it): stream
``OBJ_<bucket>``, chunk messages on ``$O.<bucket>.C.<nuid>`` (128 KiB each, nats-py's default),
one meta message per object on ``$O.<bucket>.M.<base64url(key)>`` rolled up on every write. The
meta's ``headers`` carry ``Crewlet-Sha256: [<hex>]`` beside the standard ``digest``.

Why not nats-py's ``ObjectStore.put``/``get``:

- ``get`` reads through an ordered push consumer whose flow-control replies come from a loop that
  sleeps 0.25 s, so anything over ~2 MB stalls ~250 ms per window (infra-facts N8: 261 ms for
  5 MB against 10 ms through a pull consumer). :func:`_read_chunks` reads with an ephemeral pull
  consumer (ack none, memory storage), fetching :data:`READ_WINDOW` chunks at a time and the next
  window while the caller consumes the current one: at most two windows (2 MiB) in memory.
- ``put`` takes only a whole buffer or a file; ours streams from an async iterable and keeps up to
  :data:`WRITE_WINDOW` chunk publishes in flight (about 25% faster for 20 MB here).

The end of an object is where the consumer reports nothing pending, not the chunk count in the
meta, so a missing or surplus chunk shows up as a size mismatch (:class:`ObjectCorrupt`).

Not guaranteed: a read racing an overwrite of the same key (whose old chunks are purged once the
new meta is written) fails with :class:`ObjectCorrupt`; keys are written once (ES-74).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import re
from collections.abc import AsyncIterable, AsyncIterator
from datetime import UTC, datetime
from typing import Any

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext, api
from nats.nuid import NUID

from shared import logs

from ._base import ObjectInfo, ObjectStore, check_key, rechunk
from ._errors import (
    ObjectCorrupt,
    ObjectEmpty,
    ObjectNotFound,
    ObjectStoreMisconfigured,
    ObjectStoreMismatch,
    ObjectStoreUnavailable,
)

__all__ = ["CHUNK_SIZE", "READ_WINDOW", "WRITE_WINDOW", "NatsObjectStore", "open_nats_store"]

CHUNK_SIZE = 128 * 1024
"""Bytes per chunk message (nats-py's default object chunk, ES-72)."""
READ_WINDOW = 8
"""Chunks fetched per pull request (1 MiB at 128 KiB); two windows are in memory at most."""
WRITE_WINDOW = 8
"""Chunk publishes awaiting their acknowledgement at once."""
SHA_HEADER = "Crewlet-Sha256"
"""Meta header holding the SHA-256 hex of the object's bytes."""

_BUCKET_RE = re.compile(r"[A-Za-z0-9_-]+")
_NO_PEERS = 10005
_EXISTS_OTHER_SHAPE = 10058
_ACK_TIMEOUT = 10.0
_FETCH_TIMEOUT = 5.0
_log = logs.get("objects.nats")


def _unavailable(e: BaseException, what: str) -> ObjectStoreUnavailable:
    return ObjectStoreUnavailable(f"nats object store: {what}: {type(e).__name__}: {e}".rstrip(": "))


_NATS_ERRORS = (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError)


class _Meta:
    """The parts of an object's meta message this backend reads."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.nuid = str(raw.get("nuid") or "")
        self.size = int(raw.get("size") or 0)
        self.chunks = int(raw.get("chunks") or 0)
        self.deleted = bool(raw.get("deleted"))
        self.raw = raw
        self.sha256 = ""
        headers = raw.get("headers") or {}
        value = headers.get(SHA_HEADER) if isinstance(headers, dict) else None
        if isinstance(value, list) and value:
            value = value[0]
        if isinstance(value, str):
            self.sha256 = value.lower()
        elif isinstance(raw.get("digest"), str) and raw["digest"].upper().startswith("SHA-256="):
            # written by another client: the standard digest is the same hash, base64url
            with contextlib.suppress(ValueError):
                self.sha256 = base64.urlsafe_b64decode(raw["digest"][8:]).hex()


class NatsObjectStore(ObjectStore):
    """Company files in a JetStream object-store bucket (``store.objects.type: nats``, ES-72).

    Build it with :func:`shared.objects.open_object_store`, which creates or adopts the bucket.

    Args:
        js: The JetStream context of the process's one connection (not owned: never closed here).
        bucket: The object-store bucket name (stream ``OBJ_<bucket>``).
    """

    kind = "nats"

    def __init__(self, js: JetStreamContext, bucket: str) -> None:
        self._js = js
        self.bucket = bucket
        self.stream = f"OBJ_{bucket}"
        self._nuid = NUID()

    def identity(self) -> dict[str, str]:
        """See :meth:`ObjectStore.identity`."""
        return {"type": "nats", "bucket": self.bucket}

    def _meta_subject(self, key: str) -> str:
        return f"$O.{self.bucket}.M.{base64.urlsafe_b64encode(key.encode()).decode()}"

    def _chunk_subject(self, nuid: str) -> str:
        return f"$O.{self.bucket}.C.{nuid}"

    async def _meta(self, key: str) -> _Meta | None:
        try:
            msg = await self._js.get_last_msg(self.stream, self._meta_subject(key))
        except nats.js.errors.NotFoundError:
            return None
        except _NATS_ERRORS as e:
            raise _unavailable(e, f"reading the info of {key!r}") from None
        try:
            meta = _Meta(json.loads(msg.data or b"{}"))
        except (ValueError, TypeError) as e:
            raise ObjectStoreUnavailable(f"nats object store: unreadable info for {key!r}: {e}") from None
        return None if meta.deleted or not meta.nuid else meta

    async def _purge(self, subject: str) -> None:
        try:
            await self._js.purge_stream(self.stream, subject=subject)
        except _NATS_ERRORS as e:
            _log.warning(
                "objects_chunks_purge_failed",
                bucket=self.bucket,
                subject=subject,
                error=f"{type(e).__name__}: {e}",
            )

    async def put(self, key: str, data: bytes | AsyncIterable[bytes]) -> ObjectInfo:
        """See :meth:`ObjectStore.put`: chunks first, the meta message last (it makes the object live)."""
        check_key(key)
        if isinstance(data, bytes | bytearray | memoryview) and len(data) == 0:
            raise ObjectEmpty(key)
        old = await self._meta(key)
        nuid = self._nuid.next().decode()
        subject = self._chunk_subject(nuid)
        digest = hashlib.sha256()
        size = chunks = 0
        in_flight: list[asyncio.Future[Any]] = []
        try:
            async for piece in rechunk(data, CHUNK_SIZE):
                digest.update(piece)
                in_flight.append(await self._js.publish_async(subject, piece))
                size += len(piece)
                chunks += 1
                if len(in_flight) >= WRITE_WINDOW:
                    await asyncio.wait_for(in_flight.pop(0), _ACK_TIMEOUT)
            for fut in in_flight:
                await asyncio.wait_for(fut, _ACK_TIMEOUT)
            in_flight.clear()
            if size == 0:
                raise ObjectEmpty(key)
            hexdigest = digest.hexdigest()
            meta = {
                "name": key,
                "bucket": self.bucket,
                "nuid": nuid,
                "size": size,
                "chunks": chunks,
                "mtime": datetime.now(UTC).isoformat(),
                "digest": "SHA-256=" + base64.urlsafe_b64encode(digest.digest()).decode(),
                "options": {"max_chunk_size": CHUNK_SIZE},
                "headers": {SHA_HEADER: [hexdigest]},
            }
            await self._js.publish(
                self._meta_subject(key), json.dumps(meta).encode(), headers={api.Header.ROLLUP: "sub"}
            )
        except BaseException as e:
            for fut in in_flight:
                if fut.done() and not fut.cancelled():
                    fut.exception()  # retrieved: the error raised here already says what failed
                fut.cancel()
            if chunks:
                await asyncio.shield(self._purge(subject))
            if isinstance(e, _NATS_ERRORS):
                raise _unavailable(e, f"storing {key!r}") from None
            raise
        if old is not None and old.nuid != nuid:
            await self._purge(self._chunk_subject(old.nuid))
        return ObjectInfo(key, size, hexdigest)

    async def get(self, key: str) -> AsyncIterator[bytes]:
        """See :meth:`ObjectStore.get`: the bytes come from :func:`_read_chunks` (a pull consumer)."""
        check_key(key)
        meta = await self._meta(key)
        if meta is None:
            raise ObjectNotFound(key)
        return _read_chunks(
            self._js, self.stream, self._chunk_subject(meta.nuid), key=key, size=meta.size, sha256=meta.sha256
        )

    async def head(self, key: str) -> ObjectInfo | None:
        """See :meth:`ObjectStore.head` (one read of the object's meta message)."""
        check_key(key)
        meta = await self._meta(key)
        return None if meta is None else ObjectInfo(key, meta.size, meta.sha256)

    async def delete(self, key: str) -> bool:
        """See :meth:`ObjectStore.delete`: a deleted meta (rolled up) first, then the chunks are purged."""
        check_key(key)
        meta = await self._meta(key)
        if meta is None:
            return False
        tomb = {**meta.raw, "deleted": True, "size": 0, "chunks": 0, "digest": "", "mtime": ""}
        try:
            await self._js.publish(
                self._meta_subject(key), json.dumps(tomb).encode(), headers={api.Header.ROLLUP: "sub"}
            )
        except _NATS_ERRORS as e:
            raise _unavailable(e, f"deleting {key!r}") from None
        await self._purge(self._chunk_subject(meta.nuid))
        return True

    async def close(self) -> None:
        """Nothing to release: the connection belongs to the broker link."""


async def _open_reader(
    js: JetStreamContext, stream: str, subject: str, key: str
) -> tuple[str, JetStreamContext.PullSubscription]:
    """An ephemeral pull consumer over one object's chunks (memory, no acks, gone after 30 s idle).

    Returns:
        ``(consumer name, its pull subscription)``.

    Raises:
        ObjectStoreUnavailable: the broker failed.
    """
    consumer = f"crewlet-read-{NUID().next().decode()}"
    config = api.ConsumerConfig(
        name=consumer,
        filter_subject=subject,
        ack_policy=api.AckPolicy.NONE,
        deliver_policy=api.DeliverPolicy.ALL,
        mem_storage=True,
        num_replicas=1,
        inactive_threshold=30.0,
    )
    try:
        await js.add_consumer(stream, config=config)
        psub = await js.pull_subscribe_bind(consumer, stream=stream)
    except _NATS_ERRORS as e:
        raise _unavailable(e, f"opening {key!r} for reading") from None
    return consumer, psub


async def _fetch(psub: JetStreamContext.PullSubscription, key: str) -> tuple[list[bytes], int]:
    """The next window of chunks and how many remain pending; ``([], 0)`` when none are left.

    Raises:
        ObjectStoreUnavailable: three pulls in a row brought nothing while more is pending.
    """
    for attempt in range(3):
        try:
            msgs = await psub.fetch(READ_WINDOW, timeout=_FETCH_TIMEOUT)
        except nats.js.errors.ServiceUnavailableError:
            # a 503 on the first pulls of a just-made consumer (seen right after a fleet restart,
            # while the bucket's stream settles): nothing was read yet, so asking again is safe
            await asyncio.sleep(0.25 * (2**attempt))
            continue
        except nats.errors.TimeoutError:
            # nothing came: either every chunk is read (the object lost some) or the server is slow
            info = await psub.consumer_info()
            if not info.num_pending:
                return [], 0
            continue
        return [bytes(m.data) for m in msgs], int(msgs[-1].metadata.num_pending)
    raise ObjectStoreUnavailable(
        f"nats object store: reading {key!r}: no chunk arrived in "
        f"{3 * _FETCH_TIMEOUT:.0f} s while the consumer reports more pending"
    )


async def _read_chunks(
    js: JetStreamContext, stream: str, subject: str, *, key: str, size: int, sha256: str
) -> AsyncIterator[bytes]:
    """Stream one object's chunks through an ephemeral pull consumer and verify them (ES-72, N8).

    Args:
        js: The JetStream context.
        stream: The bucket's stream (``OBJ_<bucket>``).
        subject: The object's chunk subject (``$O.<bucket>.C.<nuid>``).
        key: The object key (for errors).
        size: The size in bytes recorded in the object's meta.
        sha256: The SHA-256 hex recorded at upload (``""``: unknown, which fails verification).

    Yields:
        Each chunk's bytes, in order.

    Raises:
        ObjectCorrupt: after the last chunk, when the bytes read differ in size or digest (also as
            soon as more bytes than recorded arrive).
        ObjectStoreUnavailable: the broker failed or stopped answering mid-read.
    """
    digest = hashlib.sha256()
    read = 0
    if size == 0:  # only another client writes empty objects; there is no chunk to wait for
        if sha256 != digest.hexdigest():
            raise ObjectCorrupt(key, expected=(size, sha256), actual=(0, digest.hexdigest()))
        return
    consumer, psub = await _open_reader(js, stream, subject, key)
    ahead: asyncio.Task[tuple[list[bytes], int]] | None = None
    try:
        batch, pending = await _fetch(psub, key)
        while batch:
            ahead = asyncio.ensure_future(_fetch(psub, key)) if pending else None
            for chunk in batch:
                read += len(chunk)
                digest.update(chunk)
                if read > size:
                    raise ObjectCorrupt(
                        key,
                        expected=(size, sha256),
                        actual=(read, digest.hexdigest()),
                        detail="more bytes than recorded",
                    )
                yield chunk
            if ahead is None:
                break
            batch, pending = await ahead
            ahead = None
    except _NATS_ERRORS as e:
        raise _unavailable(e, f"reading {key!r}") from None
    finally:
        if ahead is not None:
            ahead.cancel()
            with contextlib.suppress(asyncio.CancelledError, ObjectStoreUnavailable, *_NATS_ERRORS):
                await ahead
        with contextlib.suppress(*_NATS_ERRORS):
            await psub.unsubscribe()
        with contextlib.suppress(*_NATS_ERRORS):
            await js.delete_consumer(stream, consumer)
    actual = digest.hexdigest()
    if read != size or actual != sha256:
        raise ObjectCorrupt(key, expected=(size, sha256), actual=(read, actual))


async def open_nats_store(
    js: JetStreamContext, bucket: str, *, replicas: int, budget: float
) -> NatsObjectStore:
    """Create or adopt the object-store bucket and return the store over it (ES-72, FL-25).

    Concurrently safe: an existing bucket is adopted without being rewritten; a create racing
    another node's is settled by reading what exists. While a create answers "no suitable peers"
    (10005: the other members have not arrived) or nobody answers (an election, N13/N14), it is
    retried every 250 ms within ``budget``.

    Args:
        js: The JetStream context of the process's one connection.
        bucket: The bucket name (``store.objects.bucket``): letters, digits, ``-`` and ``_``.
        replicas: ``stream.replicas``; the bucket's ``num_replicas`` when it is created.
        budget: Seconds to keep trying before giving up.

    Returns:
        The store.

    Raises:
        ObjectStoreMisconfigured: the bucket name is not a valid JetStream object-store name.
        ObjectStoreMismatch: the bucket exists with fewer replicas than ``replicas`` (names both).
        ObjectStoreUnavailable: JetStream did not let the bucket be created or read within ``budget``.
    """
    if not _BUCKET_RE.fullmatch(bucket):
        raise ObjectStoreMisconfigured(
            f"store.objects.bucket {bucket!r} is not a valid nats object-store name (letters, digits, '-', '_')"
        )
    stream = f"OBJ_{bucket}"
    deadline = asyncio.get_running_loop().time() + budget
    awaiting_logged = False
    last = ""
    while True:
        try:
            info = await js.stream_info(stream)
        except nats.js.errors.NotFoundError:
            info = None
        except _NATS_ERRORS as e:
            info, last = None, f"{type(e).__name__}: {e}"
        if info is not None:
            have = int(info.config.num_replicas or 1)
            if have < replicas:
                raise ObjectStoreMismatch(
                    f"object bucket {bucket} exists with {have} replica(s) but stream.replicas is {replicas}: "
                    f"resize it (nats stream update {stream} --replicas={replicas}) or set stream.replicas: {have}"
                )
            return NatsObjectStore(js, bucket)
        try:
            await js.create_object_store(
                bucket,
                config=api.ObjectStoreConfig(
                    description="crewlet company files (ES-70)",
                    storage=api.StorageType.FILE,
                    replicas=replicas,
                ),
            )
            _log.info("objects_bucket_created", bucket=bucket, replicas=replicas)
            return NatsObjectStore(js, bucket)
        except nats.js.errors.APIError as e:
            code = getattr(e, "err_code", None)
            last = f"{type(e).__name__}: {e}"
            if code == _NO_PEERS and not awaiting_logged:
                _log.info("jetstream_stream_awaiting_peers", bucket=stream, replicas=replicas)
                awaiting_logged = True
            elif code not in (_NO_PEERS, _EXISTS_OTHER_SHAPE):
                raise ObjectStoreUnavailable(f"creating object bucket {bucket}: {e}") from None
        except _NATS_ERRORS as e:
            last = f"{type(e).__name__}: {e}"
        if asyncio.get_running_loop().time() >= deadline:
            raise ObjectStoreUnavailable(
                f"object bucket {bucket} could not be created within {budget:.0f} s ({last})"
            )
        await asyncio.sleep(0.25)
