"""Errors of the object-store seam (ES-70..ES-74, FL-5).

::

    ServiceError
    └── ObjectsError                     base of the seam
        ├── ObjectNotFound               no live object under the key (also LookupError); a definitive no
        ├── ObjectCorrupt                the bytes read back do not match the recorded size or SHA-256
        ├── ObjectEmpty                  an upload of zero bytes was refused (also UsageError, ValueError)
        ├── ObjectKeyInvalid             the key is empty, too long or holds NUL (also UsageError, ValueError)
        ├── ObjectStoreMisconfigured     store.objects cannot be served as configured (also UsageError)
        ├── ObjectStoreMismatch          the configured store is not the recorded one, or the existing
        │                                bucket has fewer replicas than configured (FL-5, ES-71, FL-25)
        └── ObjectStoreUnavailable       the store could not be asked (S3 unreachable, broker timeout)

nats-py and boto3/botocore errors are translated in the backend modules and never escape the seam.
Only :class:`ObjectStoreUnavailable` is retryable: the others fail the same way until something
changes (the caller, the configuration, or the stored bytes).
"""

from __future__ import annotations

from shared.errors import ServiceError, UsageError

__all__ = [
    "ObjectCorrupt",
    "ObjectEmpty",
    "ObjectKeyInvalid",
    "ObjectNotFound",
    "ObjectStoreMismatch",
    "ObjectStoreMisconfigured",
    "ObjectStoreUnavailable",
    "ObjectsError",
]


class ObjectsError(ServiceError):
    """Base of every object-store failure."""


class ObjectNotFound(ObjectsError, LookupError):
    """No live object is stored under the key (absent or deleted). A definitive *no*.

    Attributes:
        key: The key asked for.
    """

    retryable = False

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"object {key!r} not found")


class ObjectCorrupt(ObjectsError):
    """The bytes read back differ from what was recorded at upload (ES-72, ES-73).

    Raised at the end of a download, after the last chunk: a streamed response must be aborted.
    Re-reading returns the same bytes; the remedy is a restore from backup or a new upload (ES-75).

    Attributes:
        key: The object's key.
        expected: ``(size in bytes, sha256 hex)`` recorded at upload.
        actual: ``(size in bytes, sha256 hex)`` of the bytes read.
    """

    retryable = False

    def __init__(
        self, key: str, *, expected: tuple[int, str], actual: tuple[int, str], detail: str = ""
    ) -> None:
        self.key = key
        self.expected = expected
        self.actual = actual
        what = "size and digest" if expected[0] != actual[0] else "digest"
        super().__init__(
            f"object {key!r} failed verification ({what} mismatch): recorded {expected[0]} bytes sha256 "
            f"{expected[1] or '(none)'}, read {actual[0]} bytes sha256 {actual[1]}"
            + (f"; {detail}" if detail else "")
        )


class ObjectEmpty(ObjectsError, UsageError, ValueError):
    """An upload of zero bytes was refused: a file row always names real bytes (ES-74)."""

    retryable = False

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"refusing to store an empty object under {key!r}")


class ObjectKeyInvalid(ObjectsError, UsageError, ValueError):
    """The key is empty, longer than 1024 UTF-8 bytes (S3's limit), or holds a NUL character."""

    retryable = False


class ObjectStoreMisconfigured(ObjectsError, UsageError):
    """``store.objects`` cannot be served as configured (e.g. a bucket name the backend refuses)."""

    retryable = False


class ObjectStoreMismatch(ObjectsError):
    """This node's ``store.objects`` is not the store the fleet uses (FL-5, ES-71), or the existing
    nats bucket has fewer replicas than ``stream.replicas`` (FL-25). The node must not boot.

    The message names both sides: the recorded (or existing) store and the configured one.
    """

    retryable = False


class ObjectStoreUnavailable(ObjectsError):
    """The store could not be asked, or did not answer (S3 unreachable, broker timeout, no responders).

    Retrying later is safe. After a failed :meth:`~shared.objects.ObjectStore.put` the object may or
    may not exist; a retried put of the same bytes under the same key converges.
    """

    retryable = True
