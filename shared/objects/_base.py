"""The object-store contract: one abstract class, one module per backend (ES-70, STYLE.md).

A store holds the company's file bytes under keys; what the company agrees on about a file (path,
version, size, sha256, key) is a replicated tracker row written *after* the object (ES-74). Every
object carries the SHA-256 of its bytes recorded at upload, and every download is verified against
it at the end (ES-72, ES-73). Nothing here buffers a whole file: uploads and downloads move in
chunks of at most a few MiB.

Not guaranteed: two concurrent puts of *different* bytes under one key leave one of them (the last
to finish); keys are meant to be written once (a new file version is a new key, ES-74).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Literal

from ._errors import ObjectKeyInvalid

__all__ = ["MAX_KEY_BYTES", "ObjectInfo", "ObjectStore", "check_key", "rechunk"]

MAX_KEY_BYTES = 1024
"""Longest key accepted, in UTF-8 bytes (S3's limit, applied to both backends)."""


@dataclass(frozen=True)
class ObjectInfo:
    """What a store knows about one object.

    Attributes:
        key: The object's key.
        size: Its length in bytes.
        sha256: The SHA-256 of its bytes recorded at upload, lowercase hex (64 characters); ``""``
            when the object carries none (written by something other than this seam).
    """

    key: str
    size: int
    sha256: str


class ObjectStore(abc.ABC):
    """The one store the fleet keeps company files in (ES-70): JetStream object store or S3.

    Build one with :func:`shared.objects.open_object_store`; every method may be called
    concurrently from one event loop. Blocking libraries (boto3) run in worker threads, never on
    the loop.
    """

    #: ``nats`` or ``s3``: the backend, as in ``store.objects.type``.
    kind: Literal["nats", "s3"]

    @abc.abstractmethod
    def identity(self) -> dict[str, str]:
        """Return what names this store fleet-wide, as recorded in the ``objects`` slot (ES-71).

        Returns:
            ``{"type": "nats", "bucket": ...}`` or
            ``{"type": "s3", "endpoint_url": ..., "bucket": ...}`` (``endpoint_url`` without a
            trailing slash; ``""`` means the AWS default endpoint).
        """

    @abc.abstractmethod
    async def put(self, key: str, data: bytes | AsyncIterable[bytes]) -> ObjectInfo:
        """Store ``data`` under ``key`` (replacing any object there) and return what was stored.

        The SHA-256 is computed while the bytes stream through and recorded with the object.

        Args:
            key: The object key (1..1024 UTF-8 bytes, no NUL), e.g. ``sha256/ab/<hex>``.
            data: The bytes, or an async iterable of byte pieces of any sizes (consumed once).

        Returns:
            The stored object's key, size in bytes and SHA-256 hex.

        Raises:
            ObjectEmpty: ``data`` holds zero bytes (nothing is stored).
            ObjectKeyInvalid: the key is empty, too long or holds NUL.
            ObjectStoreUnavailable: the store failed mid-way; the key holds the old object or none.
        """

    @abc.abstractmethod
    async def get(self, key: str) -> AsyncIterator[bytes]:
        """Open ``key`` for reading and return an iterator over its bytes, in chunks.

        The object's existence is checked before this returns; the bytes stream as the iterator is
        consumed, a few chunks ahead, never the whole object in memory. After the last chunk the
        size and SHA-256 are compared with those recorded at upload.

        Args:
            key: The object key.

        Returns:
            An async iterator of byte chunks (128 KiB on nats, up to 1 MiB on s3). Close it
            (``aclose()``) when abandoning it early.

        Raises:
            ObjectNotFound: no live object under ``key`` (raised by this call, before any byte).
            ObjectKeyInvalid: the key is empty, too long or holds NUL.
            ObjectCorrupt: raised by the iterator after the last chunk when size or digest differ.
            ObjectStoreUnavailable: the store failed (by this call or mid-stream).
        """

    @abc.abstractmethod
    async def head(self, key: str) -> ObjectInfo | None:
        """Return what the store records about ``key``, or None when no live object is there.

        ``size`` is the stored size (S3 ``Content-Length``; the nats object info), ``sha256`` the
        digest recorded at upload. The bytes are not read (ES-75 audits with this).

        Raises:
            ObjectKeyInvalid: the key is empty, too long or holds NUL.
            ObjectStoreUnavailable: the store could not be asked.
        """

    @abc.abstractmethod
    async def delete(self, key: str) -> bool:
        """Delete ``key``; return True when a live object was there, False when none was.

        Raises:
            ObjectKeyInvalid: the key is empty, too long or holds NUL.
            ObjectStoreUnavailable: the store could not be asked; the object may or may not remain.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Release what the store holds (threads, clients); not the broker connection it rides."""


def check_key(key: str) -> str:
    """Return ``key`` when both backends can hold it.

    Raises:
        ObjectKeyInvalid: it is empty, longer than :data:`MAX_KEY_BYTES` UTF-8 bytes, or holds NUL.
    """
    if not key:
        raise ObjectKeyInvalid("object key is empty")
    if "\x00" in key:
        raise ObjectKeyInvalid(f"object key {key!r} holds a NUL character")
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise ObjectKeyInvalid(f"object key is longer than {MAX_KEY_BYTES} UTF-8 bytes: {key[:64]!r}...")
    return key


async def rechunk(data: bytes | AsyncIterable[bytes], size: int) -> AsyncIterator[bytes]:
    """Yield ``data`` as pieces of exactly ``size`` bytes, the last one shorter (never empty).

    Args:
        data: The bytes, or an async iterable of pieces of any sizes.
        size: The piece size in bytes (> 0).

    Yields:
        Non-empty ``bytes`` of length ``size`` (the last may be shorter). Holds at most one piece
        plus the incoming one in memory.
    """
    if isinstance(data, bytes | bytearray | memoryview):
        view = memoryview(data)
        for start in range(0, len(view), size):
            yield bytes(view[start : start + size])
        return
    buf = bytearray()
    async for piece in data:
        if not piece:
            continue
        buf += piece
        while len(buf) >= size:
            yield bytes(buf[:size])
            del buf[:size]
    if buf:
        yield bytes(buf)
