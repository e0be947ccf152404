"""Object-store seam: the one store the fleet keeps company files in (ES-70..ES-74, FL-5).

Backends: a JetStream object-store bucket (``nats``, the default) or an S3 bucket (``s3``), behind
one abstract :class:`ObjectStore`. Every object's SHA-256 is recorded at upload and verified at the
end of every download. :func:`open_object_store` opens the configured store at boot and
:func:`claim_objects_slot` records it in coordination, refusing a node configured for another.
Nothing above this seam imports nats-py's object store or boto3.
"""

from ._base import MAX_KEY_BYTES, ObjectInfo, ObjectStore
from ._errors import (
    ObjectCorrupt,
    ObjectEmpty,
    ObjectKeyInvalid,
    ObjectNotFound,
    ObjectsError,
    ObjectStoreMisconfigured,
    ObjectStoreMismatch,
    ObjectStoreUnavailable,
)
from ._nats import NatsObjectStore
from ._open import SLOT_KEY, claim_objects_slot, describe, open_object_store
from ._s3 import S3ObjectStore

__all__ = [
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
