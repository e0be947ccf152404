"""The s3 backend: boto3 against any S3-compatible server (ES-73, FL-5).

boto3 blocks, so every call runs on this store's own small thread pool (never the event loop's
default executor, which other code shares); one client is reused for the store's life (infra-facts
T2). Addressing is path-style (``http://host/bucket/key``), which every S3-compatible server
accepts; the region comes from ``store.objects.region`` and credentials from the standard AWS
chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, profiles, instance roles).

Every object carries ``x-amz-meta-sha256`` (the hex digest of its bytes, computed while they
stream through) and ``x-amz-meta-size`` (their count), because a multipart object's own checksum is composite, a checksum of part
checksums (ES-73). Uploads up to :data:`MULTIPART_THRESHOLD` are one ``PutObject`` carrying
``x-amz-checksum-sha256`` so the server verifies the bytes it received; larger ones go through
boto3's managed multipart upload with a SHA-256 checksum per part. An upload from an async
iterable whose length is unknown spools to a temporary file once it outgrows the threshold (the
digest must be known before the first part, since S3 metadata is fixed when an upload starts),
so memory stays bounded by the threshold.

Downloads stream the body in :data:`READ_CHUNK` pieces and compare the byte count and digest with
the recorded ones after the last piece (``Content-Length`` stands in for an object written without
``x-amz-meta-size``). :meth:`S3ObjectStore.head` reports the stored ``Content-Length``, so an object
rewritten behind the store's back shows its real size to the collector (ES-75).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import io
import tempfile
from collections.abc import AsyncIterable, AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, TypeVar

import boto3
import boto3.exceptions
import boto3.s3.transfer
import botocore.config
import botocore.exceptions

from shared import logs

from ._base import ObjectInfo, ObjectStore, check_key
from ._errors import (
    ObjectCorrupt,
    ObjectEmpty,
    ObjectNotFound,
    ObjectsError,
    ObjectStoreMisconfigured,
    ObjectStoreUnavailable,
)

__all__ = ["MULTIPART_THRESHOLD", "READ_CHUNK", "S3ObjectStore", "open_s3_store"]

MULTIPART_THRESHOLD = 8 * 1024 * 1024
"""Bytes above which an upload is multipart (8 MiB parts, 4 in flight)."""
READ_CHUNK = 1024 * 1024
"""Bytes per piece a download yields (the last may be shorter)."""
META_SHA = "sha256"
"""User-metadata key holding the SHA-256 hex (``x-amz-meta-sha256`` on the wire)."""
META_SIZE = "size"
"""User-metadata key holding the size in bytes recorded at upload (``x-amz-meta-size``)."""

_T = TypeVar("_T")
_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
_AUTH = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403", "Forbidden"}
_log = logs.get("objects.s3")


def _code(e: botocore.exceptions.ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _translate(e: Exception, what: str) -> ObjectsError:
    """Map a boto3/botocore error to this seam's errors (not-found is handled by the callers)."""
    if isinstance(e, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError):
        return ObjectStoreMisconfigured(
            f"s3 object store: {what}: no AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
        )
    if isinstance(e, botocore.exceptions.ClientError) and _code(e) in _AUTH:
        return ObjectStoreMisconfigured(
            f"s3 object store: {what}: refused ({_code(e)}): check the credentials"
        )
    return ObjectStoreUnavailable(f"s3 object store: {what}: {type(e).__name__}: {e}")


_BOTO_ERRORS = (
    botocore.exceptions.BotoCoreError,
    botocore.exceptions.ClientError,
    boto3.exceptions.Boto3Error,
)


class S3ObjectStore(ObjectStore):
    """Company files in one S3 bucket (``store.objects.type: s3``, ES-73, FL-5).

    Build it with :func:`shared.objects.open_object_store`, which creates the bucket if absent.

    Args:
        client: A boto3 S3 client (owned: closed by :meth:`close`).
        bucket: The bucket name.
        endpoint_url: The endpoint as configured (``""`` = the AWS default).
        executor: The thread pool every boto3 call runs on (owned: shut down by :meth:`close`).
    """

    kind = "s3"

    def __init__(self, client: Any, bucket: str, endpoint_url: str, executor: ThreadPoolExecutor) -> None:
        self._client = client
        self.bucket = bucket
        self.endpoint_url = endpoint_url.rstrip("/")
        self._executor = executor
        self._closed = False
        self._transfer = boto3.s3.transfer.TransferConfig(
            multipart_threshold=MULTIPART_THRESHOLD,
            multipart_chunksize=MULTIPART_THRESHOLD,
            max_concurrency=4,
        )

    def identity(self) -> dict[str, str]:
        """See :meth:`ObjectStore.identity`."""
        return {"type": "s3", "endpoint_url": self.endpoint_url, "bucket": self.bucket}

    async def _run(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(fn, *args, **kwargs)
        )

    async def put(self, key: str, data: bytes | AsyncIterable[bytes]) -> ObjectInfo:
        """See :meth:`ObjectStore.put`."""
        check_key(key)
        if isinstance(data, bytes | bytearray | memoryview):
            if len(data) == 0:
                raise ObjectEmpty(key)
            return await self._put_bytes(key, bytes(data))
        head = bytearray()
        pieces = aiter(data)
        async for piece in pieces:
            head += piece
            if len(head) > MULTIPART_THRESHOLD:
                return await self._put_spooled(key, head, pieces)
        if not head:
            raise ObjectEmpty(key)
        return await self._put_bytes(key, bytes(head))

    async def _put_bytes(self, key: str, data: bytes) -> ObjectInfo:
        digest = await self._run(hashlib.sha256, data) if len(data) > READ_CHUNK else hashlib.sha256(data)
        hexdigest = digest.hexdigest()
        try:
            if len(data) <= MULTIPART_THRESHOLD:
                await self._run(
                    self._client.put_object,
                    Bucket=self.bucket,
                    Key=key,
                    Body=data,
                    ChecksumSHA256=base64.b64encode(digest.digest()).decode(),
                    Metadata={META_SHA: hexdigest, META_SIZE: str(len(data))},
                )
            else:
                await self._upload(key, io.BytesIO(data), hexdigest, len(data))
        except _BOTO_ERRORS as e:
            raise _translate(e, f"storing {key!r}") from None
        return ObjectInfo(key, len(data), hexdigest)

    async def _put_spooled(self, key: str, head: bytearray, rest: AsyncIterator[bytes]) -> ObjectInfo:
        digest = hashlib.sha256()
        size = 0
        spool: IO[bytes] = await self._run(tempfile.TemporaryFile)
        try:
            pending: bytes | bytearray = head
            while True:
                digest.update(pending)
                size += len(pending)
                await self._run(spool.write, pending)
                try:
                    pending = await anext(rest)
                except StopAsyncIteration:
                    break
            await self._run(spool.seek, 0)
            try:
                await self._upload(key, spool, digest.hexdigest(), size)
            except _BOTO_ERRORS as e:
                raise _translate(e, f"storing {key!r}") from None
        finally:
            await self._run(spool.close)
        return ObjectInfo(key, size, digest.hexdigest())

    async def _upload(self, key: str, fileobj: IO[bytes], hexdigest: str, size: int) -> None:
        await self._run(
            self._client.upload_fileobj,
            fileobj,
            self.bucket,
            key,
            ExtraArgs={
                "Metadata": {META_SHA: hexdigest, META_SIZE: str(size)},
                "ChecksumAlgorithm": "SHA256",
            },
            Config=self._transfer,
        )

    async def get(self, key: str) -> AsyncIterator[bytes]:
        """See :meth:`ObjectStore.get`: one ``GetObject``, its body read in :data:`READ_CHUNK` pieces."""
        check_key(key)
        try:
            resp = await self._run(self._client.get_object, Bucket=self.bucket, Key=key)
        except botocore.exceptions.ClientError as e:
            if _code(e) in _NOT_FOUND:
                raise ObjectNotFound(key) from None
            raise _translate(e, f"reading {key!r}") from None
        except _BOTO_ERRORS as e:
            raise _translate(e, f"reading {key!r}") from None
        meta = resp.get("Metadata") or {}
        stored = int(resp.get("ContentLength") or 0)
        try:
            size = int(meta.get(META_SIZE, stored))
        except ValueError:
            size = -1  # unreadable: fails verification
        return self._stream(key, resp["Body"], size, str(meta.get(META_SHA, "")).lower())

    async def _stream(self, key: str, body: Any, size: int, sha256: str) -> AsyncIterator[bytes]:
        digest = hashlib.sha256()
        read = 0
        try:
            while True:
                try:
                    chunk: bytes = await self._run(body.read, READ_CHUNK)
                except botocore.exceptions.FlexibleChecksumError as e:
                    raise ObjectCorrupt(
                        key,
                        expected=(size, sha256),
                        actual=(read, digest.hexdigest()),
                        detail=f"the server's checksum disagrees: {e}",
                    ) from None
                except _BOTO_ERRORS as e:
                    raise _translate(e, f"reading {key!r}") from None
                if not chunk:
                    break
                read += len(chunk)
                digest.update(chunk)
                yield chunk
        finally:
            with contextlib.suppress(RuntimeError, *_BOTO_ERRORS):  # RuntimeError: the store was closed
                await self._run(body.close)
        actual = digest.hexdigest()
        if read != size or actual != sha256:
            raise ObjectCorrupt(key, expected=(size, sha256), actual=(read, actual))

    async def head(self, key: str) -> ObjectInfo | None:
        """See :meth:`ObjectStore.head`: one ``HeadObject``; ``size`` is the stored ``Content-Length``."""
        check_key(key)
        try:
            resp = await self._run(self._client.head_object, Bucket=self.bucket, Key=key)
        except botocore.exceptions.ClientError as e:
            if _code(e) in _NOT_FOUND:
                return None
            raise _translate(e, f"reading the info of {key!r}") from None
        except _BOTO_ERRORS as e:
            raise _translate(e, f"reading the info of {key!r}") from None
        sha = str((resp.get("Metadata") or {}).get(META_SHA, "")).lower()
        return ObjectInfo(key, int(resp.get("ContentLength") or 0), sha)

    async def delete(self, key: str) -> bool:
        """See :meth:`ObjectStore.delete`: a ``HeadObject`` (S3 deletes do not say), then ``DeleteObject``."""
        present = await self.head(key) is not None
        if not present:
            return False
        try:
            await self._run(self._client.delete_object, Bucket=self.bucket, Key=key)
        except _BOTO_ERRORS as e:
            raise _translate(e, f"deleting {key!r}") from None
        return True

    async def close(self) -> None:
        """Close the client's connection pool and stop the store's threads (a second call does nothing)."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._run(self._client.close)
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)


def _make_client(endpoint_url: str, region: str) -> Any:
    config = botocore.config.Config(
        s3={"addressing_style": "path"},
        retries={"max_attempts": 3, "mode": "standard"},
        connect_timeout=5,
        read_timeout=60,
        max_pool_connections=16,
    )
    session = boto3.session.Session(region_name=region or None)
    return session.client("s3", endpoint_url=endpoint_url or None, config=config)


def _ensure_bucket(client: Any, bucket: str, region: str) -> bool:
    """Create ``bucket`` when absent; return True when this call created it."""
    try:
        client.head_bucket(Bucket=bucket)
        return False
    except botocore.exceptions.ClientError as e:
        if _code(e) not in ("404", "NoSuchBucket", "NotFound"):
            raise
    kwargs: dict[str, Any] = {"Bucket": bucket}
    if region and region != "us-east-1":
        kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
    try:
        client.create_bucket(**kwargs)
    except botocore.exceptions.ClientError as e:
        if _code(e) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
        client.head_bucket(Bucket=bucket)  # created by a peer meanwhile; a bucket someone else owns raises
        return False
    return True


async def open_s3_store(bucket: str, *, endpoint_url: str, region: str, budget: float) -> S3ObjectStore:
    """Build the S3 client, create the bucket if absent, and return the store (ES-73, FL-5).

    Connection failures are retried every 0.5 s within ``budget`` (an S3 server starting beside
    the node); refusals are not.

    Args:
        bucket: ``store.objects.bucket``.
        endpoint_url: ``store.objects.endpoint_url``; ``""`` = the AWS default endpoint.
        region: ``store.objects.region``.
        budget: Seconds to keep trying to reach the server.

    Returns:
        The store, owning its client and threads.

    Raises:
        ObjectStoreMisconfigured: no credentials, or the server refused them or the bucket.
        ObjectStoreUnavailable: the server could not be reached within ``budget``.
    """
    executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="crewlet-s3")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget
    try:
        client = await loop.run_in_executor(executor, _make_client, endpoint_url, region)
        while True:
            try:
                created = await loop.run_in_executor(executor, _ensure_bucket, client, bucket, region)
                break
            except botocore.exceptions.ClientError as e:
                if _code(e) in _AUTH or _code(e) in ("BucketAlreadyExists", "InvalidBucketName"):
                    raise ObjectStoreMisconfigured(
                        f"s3 object store: bucket {bucket} at {endpoint_url or 'AWS'} refused: {_code(e)}: {e}"
                    ) from None
                last: Exception = e
            except _BOTO_ERRORS as e:
                translated = _translate(e, f"opening bucket {bucket}")
                if isinstance(translated, ObjectStoreMisconfigured):
                    raise translated from None
                last = e
            if loop.time() >= deadline:
                raise ObjectStoreUnavailable(
                    f"s3 object store: bucket {bucket} at {endpoint_url or 'AWS'} not reachable within "
                    f"{budget:.0f} s ({type(last).__name__}: {last})"
                )
            await asyncio.sleep(0.5)
    except BaseException:
        executor.shutdown(wait=False, cancel_futures=True)
        raise
    if created:
        _log.info("objects_bucket_created", bucket=bucket, endpoint_url=endpoint_url)
    return S3ObjectStore(client, bucket, endpoint_url, executor)
