"""Errors of the estate seam (spec/estate.md).

"Called it wrong" and "the world failed" are kept apart; "outcome unknown" is a type of its own::

    CrewletError
    ├── UsageError
    │   └── EstateUsageError            (also EstateError) the call is wrong; never retryable
    │       ├── NotFound                an unknown project, space, work item, page or file (404)
    │       ├── InvalidField            a field fails its rule; names the field (400)
    │       │   └── WrongStream         a position of another domain's log (ES-22)
    │       ├── VersionConflict         a stale ``if_match``; carries the current version (409)
    │       ├── OpReused                an operation id already landed on another object (ES-7, 409)
    │       └── TooLarge                a body or upload over its limit; names field and limit (413)
    └── ServiceError
        └── EstateServiceError          (also EstateError) the estate could not serve
            ├── Refused                 a read/write refusal code of ES-29 (``behind``, ``stalled``, ...)
            ├── OutcomeUnknown          a write whose fate is unknown: retry with the same op id (ES-11)
            └── StoreFailed             the SQLite copy failed (disk, lock, corruption)

:func:`to_wire` / :func:`from_wire` carry every error across the router (ES-38) unchanged.
"""

from __future__ import annotations

from typing import Any

from shared.errors import CrewletError, ServiceError, UsageError

__all__ = [
    "RETRY_HERE",
    "EstateError",
    "EstateServiceError",
    "EstateUsageError",
    "InvalidField",
    "NotFound",
    "OpReused",
    "OutcomeUnknown",
    "Refused",
    "StoreFailed",
    "TooLarge",
    "VersionConflict",
    "WrongStream",
    "from_wire",
    "to_wire",
]

RETRY_HERE = frozenset(
    {"behind", "no_quorum", "broker_unreachable", "broker_busy", "stalled", "floor_unknown"}
)
"""Refusal codes worth retrying on the same node (ES-29); the router moves on for every other code."""


class EstateError(CrewletError):
    """Base of every estate failure."""

    code = "estate_error"

    def wire(self) -> dict[str, Any]:
        """Return the error's fields for the wire (ES-38), besides ``code`` and ``detail``."""
        return {}


class EstateUsageError(EstateError, UsageError):
    """The call is wrong; repeating it unchanged fails the same way."""

    code = "invalid"


class EstateServiceError(EstateError, ServiceError):
    """The estate could not serve the call; see ``retryable``."""

    code = "unavailable"


class NotFound(EstateUsageError):
    """The named object does not exist (after the caller's floors were applied).

    Attributes:
        what: ``project``, ``space``, ``work_item``, ``page`` or ``file``.
        key: The name the caller gave.
    """

    code = "not_found"

    def __init__(self, what: str, key: str) -> None:
        self.what = what
        self.key = key
        super().__init__(f"no {what.replace('_', ' ')} {key!r}")

    def wire(self) -> dict[str, Any]:
        """See :meth:`EstateError.wire`."""
        return {"what": self.what, "key": self.key}


class InvalidField(EstateUsageError):
    """A field of the call breaks its rule.

    Attributes:
        field: The field's name as the caller wrote it (``key``, ``path``, ``type``...).
    """

    code = "invalid"

    def __init__(self, field: str, detail: str) -> None:
        self.field = field
        self.detail = detail
        super().__init__(f"{field}: {detail}")

    def wire(self) -> dict[str, Any]:
        """See :meth:`EstateError.wire`."""
        return {"field": self.field}


class WrongStream(InvalidField):
    """A position names another domain's log (ES-22); refused, never waited for."""

    code = "wrong_stream"


class VersionConflict(EstateUsageError):
    """A stale ``if_match`` (CO-24, ES-10): the object is at ``current_version``.

    Attributes:
        current_version: The object's version now; None when the object has none yet.
    """

    code = "conflict"

    def __init__(self, detail: str, current_version: int | None) -> None:
        self.current_version = current_version
        super().__init__(detail)

    def wire(self) -> dict[str, Any]:
        """See :meth:`EstateError.wire`."""
        return {"current_version": self.current_version}


class OpReused(EstateUsageError):
    """The operation id already landed on another object (ES-7).

    Attributes:
        op_id: The operation id.
        position: Where its first record landed (``<stream>@<gen>:<seq>``).
        object_id: The object it landed on.
    """

    code = "op_reused"

    def __init__(self, op_id: str, position: str, object_id: str) -> None:
        self.op_id = op_id
        self.position = position
        self.object_id = object_id
        super().__init__(f"operation {op_id} already landed at {position} on {object_id}")

    def wire(self) -> dict[str, Any]:
        """See :meth:`EstateError.wire`."""
        return {"op_id": self.op_id, "position": self.position, "object_id": self.object_id}


class Fenced(EstateUsageError):
    """A write made for a seat under an epoch older than the seat's current one (FL-74).

    The writer lost the seat (a zombie after a pause, or a turn that outlived its lease); the write
    is refused by the data node before anything is appended. Not retryable: the writer must stop.

    Attributes:
        seat: The seat the write was made for.
        epoch: The epoch it carried.
    """

    code = "fenced"

    def __init__(self, seat: str, epoch: int) -> None:
        self.seat = seat
        self.epoch = epoch
        super().__init__(f"seat {seat!r} is no longer held at epoch {epoch}: the write is refused (fenced)")

    def wire(self) -> dict[str, Any]:
        """See :meth:`EstateError.wire`."""
        return {"seat": self.seat, "epoch": self.epoch}


class TooLarge(EstateUsageError):
    """A value over its size limit.

    Attributes:
        field: The field (``body``, ``content``).
        limit: The limit in bytes.
        size: The size given, in bytes.
    """

    code = "too_large"

    def __init__(self, field: str, limit: int, size: int) -> None:
        self.field = field
        self.limit = limit
        self.size = size
        super().__init__(f"{field} is {size} bytes; the limit is {limit} bytes")

    def wire(self) -> dict[str, Any]:
        """See :meth:`EstateError.wire`."""
        return {"field": self.field, "limit": self.limit, "size": self.size}


class Refused(EstateServiceError):
    """A refusal code of ES-29 (reads) or of the write path (ES-9..ES-12).

    Attributes:
        refusal: The code (``behind``, ``stalled``, ``no_quorum``, ``broker_unreachable``, ...).
        retry_after: Seconds the caller may wait before asking again; None when no hint.
        node: The node that refused.
    """

    code = "refused"

    def __init__(
        self, refusal: str, detail: str, *, retry_after: float | None = None, node: str = ""
    ) -> None:
        self.refusal = refusal
        self.retry_after = retry_after
        self.node = node
        super().__init__(f"{refusal}: {detail}")
        self.retryable = refusal in RETRY_HERE

    def wire(self) -> dict[str, Any]:
        """See :meth:`EstateError.wire`."""
        return {"refusal": self.refusal, "retry_after": self.retry_after, "node": self.node}


class OutcomeUnknown(EstateServiceError):
    """A write whose fate could not be established (ES-11): retry with the same ``op_id``.

    Attributes:
        op_id: The operation id to retry with.
    """

    code = "unknown"

    def __init__(self, op_id: str, detail: str) -> None:
        self.op_id = op_id
        super().__init__(f"outcome of {op_id} unknown: {detail}")

    def wire(self) -> dict[str, Any]:
        """See :meth:`EstateError.wire`."""
        return {"op_id": self.op_id}


class StoreFailed(EstateServiceError):
    """The SQLite copy failed (I/O, lock held by another process, corruption)."""

    code = "store_failed"


def to_wire(err: EstateError) -> dict[str, Any]:
    """Encode ``err`` as ``{"code", "detail", ...fields}`` for a router reply (ES-38)."""
    return {"code": err.code, "detail": str(err), **err.wire()}


def from_wire(data: dict[str, Any]) -> EstateError:
    """Rebuild the error :func:`to_wire` encoded; an unknown code becomes :class:`EstateServiceError`."""
    code = str(data.get("code", ""))
    detail = str(data.get("detail", ""))
    err: EstateError
    if code == "not_found":
        err = NotFound(str(data.get("what", "object")), str(data.get("key", "")))
    elif code in ("invalid", "wrong_stream"):
        cls = WrongStream if code == "wrong_stream" else InvalidField
        field = str(data.get("field", ""))
        prefix = f"{field}: "
        err = cls(field, detail[len(prefix) :] if detail.startswith(prefix) else detail)
    elif code == "conflict":
        cv = data.get("current_version")
        err = VersionConflict(detail, cv if isinstance(cv, int) else None)
    elif code == "op_reused":
        err = OpReused(
            str(data.get("op_id", "")), str(data.get("position", "")), str(data.get("object_id", ""))
        )
    elif code == "fenced":
        ep = data.get("epoch")
        err = Fenced(str(data.get("seat", "")), ep if isinstance(ep, int) else 0)
    elif code == "too_large":
        err = TooLarge(str(data.get("field", "")), int(data.get("limit", 0)), int(data.get("size", 0)))
    elif code == "refused":
        ra = data.get("retry_after")
        refusal = str(data.get("refusal", "refused"))
        prefix = f"{refusal}: "
        err = Refused(
            refusal,
            detail[len(prefix) :] if detail.startswith(prefix) else detail,
            retry_after=float(ra) if isinstance(ra, int | float) else None,
            node=str(data.get("node", "")),
        )
    elif code == "unknown":
        op_id = str(data.get("op_id", ""))
        prefix = f"outcome of {op_id} unknown: "
        err = OutcomeUnknown(op_id, detail[len(prefix) :] if detail.startswith(prefix) else detail)
    elif code == "store_failed":
        err = StoreFailed(detail)
    else:
        err = EstateServiceError(detail or code)
    return err
