"""The coordination store on JetStream KV, riding the process's one connection (FL-2, FL-32..FL-37).

nats-py errors are translated here and nowhere else (STYLE.md "Errors"; infra-facts N1, N2, N7):

- ``KeyWrongLastSequenceError`` whose server code is 10071 → :class:`RevisionConflict` (a real *no*).
- The same error with code 10164 (the leader holds an uncommitted proposal: during a quorum loss,
  or under concurrent writers of one key) → :class:`CoordinationBusy`, a
  :class:`CoordinationUnavailable`: it is *not* a conflict and must not read as "lost the lease".
- A timed-out or connection-lost *write* → :class:`OutcomeUnknown` (it may have been committed).
- No responders (an election, N14), a timed-out read → :class:`CoordinationUnavailable`.

Reads never use direct get (FL-37: a replica may serve a stale value), so a read after one's own
acknowledged write sees it. Time comes from the server's message timestamp (FL-36).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from ._base import Coordination, Entry
from ._buckets import BucketSpec, Slot
from ._errors import CoordinationBusy, CoordinationUnavailable, OutcomeUnknown, RevisionConflict

__all__ = ["NatsCoordination"]

_KV_OP = "KV-Operation"
_CONFLICT = 10071
_UNCOMMITTED = 10164
_MAX_TOMBSTONES = 10_000
"""Tombstone sequences remembered for :meth:`NatsCoordination.create` (a bound, not a tuning)."""


def _server_code(e: BaseException) -> int | None:
    ctx = e.__context__
    code = getattr(ctx, "err_code", None) or getattr(e, "err_code", None)
    return int(code) if code is not None else None


def _parse_time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str) and value:
        text = value.rstrip("Z")
        if "." in text:  # nanoseconds: keep microseconds
            head, frac = text.split(".", 1)
            frac = "".join(ch for ch in frac if ch.isdigit())[:6]
            text = f"{head}.{frac}"
        try:
            return datetime.fromisoformat(text).replace(tzinfo=UTC)
        except ValueError:
            pass
    return datetime.now(UTC)


class NatsCoordination(Coordination):
    """Coordination on JetStream KV buckets (``embedded-kv``).

    Build it with :func:`shared.coordination.provision`, which creates or adopts every bucket.
    """

    kind = "embedded-kv"

    def __init__(self, js: JetStreamContext, buckets: dict[Slot, tuple[BucketSpec, KeyValue]]) -> None:
        self._js = js
        self._buckets = buckets
        self._tombstones: dict[tuple[Slot, str], int] = {}

    def bucket(self, slot: Slot) -> BucketSpec:
        """Return the spec of ``slot``'s bucket."""
        return self._buckets[slot][0]

    def _kv(self, slot: Slot) -> KeyValue:
        try:
            return self._buckets[slot][1]
        except KeyError:
            raise ValueError(f"unknown coordination slot {slot!r}") from None

    def _translate(self, e: BaseException, key: str, expected: int, *, write: bool) -> Exception:
        if isinstance(e, nats.js.errors.KeyWrongLastSequenceError) or (
            isinstance(e, nats.js.errors.BadRequestError) and _server_code(e) in (_CONFLICT, _UNCOMMITTED)
        ):
            code = _server_code(e)
            if code == _UNCOMMITTED:
                return CoordinationBusy(f"{key}: leader has an uncommitted proposal (10164)")
            return RevisionConflict(key, expected)
        if isinstance(e, nats.js.errors.NoStreamResponseError | nats.errors.NoRespondersError):
            return CoordinationUnavailable(f"{key}: no responders (election or stream missing)")
        if isinstance(e, nats.errors.TimeoutError | asyncio.TimeoutError):
            if write:
                return OutcomeUnknown(f"{key}: write timed out; it may have landed")
            return CoordinationUnavailable(f"{key}: read timed out")
        if isinstance(
            e,
            nats.errors.ConnectionClosedError
            | nats.errors.ConnectionReconnectingError
            | nats.errors.StaleConnectionError
            | nats.errors.OutboundBufferLimitError,
        ):
            if write:
                return OutcomeUnknown(f"{key}: connection lost during write")
            return CoordinationUnavailable(f"{key}: connection lost")
        return CoordinationUnavailable(f"{key}: {type(e).__name__}: {e}")

    async def get(self, slot: Slot, key: str) -> Entry | None:
        """See :meth:`Coordination.get`."""
        self._kv(slot)
        spec = self._buckets[slot][0]
        try:
            msg = await self._js.get_msg(f"KV_{spec.bucket}", subject=f"$KV.{spec.bucket}.{key}")
        except nats.js.errors.NotFoundError:
            self._tombstones.pop((slot, key), None)
            return None
        except Exception as e:  # noqa: BLE001 - every library error is translated here
            raise self._translate(e, key, 0, write=False) from None
        headers = msg.headers or {}
        if msg.data is None or headers.get(_KV_OP) in ("DEL", "PURGE") or headers.get("Nats-Marker-Reason"):
            # deleted, purged, or an expiry marker (infra-facts N7): remember where, for create
            if msg.seq:
                if len(self._tombstones) >= _MAX_TOMBSTONES:
                    self._tombstones.clear()
                self._tombstones[(slot, key)] = int(msg.seq)
            return None
        self._tombstones.pop((slot, key), None)
        return Entry(key, bytes(msg.data), int(msg.seq or 0), _parse_time(msg.time))

    async def create(self, slot: Slot, key: str, value: bytes) -> int:
        """See :meth:`Coordination.create`.

        nats-py's ``create`` of a deleted key costs three round trips (a write expecting no
        message, which the tombstone refuses; a read that finds the tombstone; the write at its
        sequence). When a read of this store found the key's tombstone, the write is first sent
        expecting that sequence: it lands only while the tombstone is still the key's last message,
        which is "absent", so it is the same create in one round trip; refused, it falls back.
        """
        kv = self._kv(slot)  # an unknown slot is the caller's mistake (ValueError), not "unknown"
        tombstone = self._tombstones.pop((slot, key), None)
        if tombstone is not None:
            try:
                return int(await kv.update(key, value, last=tombstone))
            except Exception as e:  # noqa: BLE001
                err = self._translate(e, key, 0, write=True)
                if not isinstance(err, RevisionConflict):
                    raise err from None
                # written or deleted again since: the plain create decides
        try:
            return int(await kv.create(key, value))
        except nats.js.errors.KeyNotFoundError:
            # nats-py's create: the write expecting no message was refused (the key had one), then
            # its read to tell a tombstone from a live key found nothing — a replica that has not
            # applied a concurrent creator's write yet, or an age-out in between. Somebody's write
            # was there: a conflict (the caller re-reads), never "unavailable". Seen in CI: two nodes
            # booting at once both creating the activation pointer; the loser's boot failed.
            raise RevisionConflict(key, 0) from None
        except Exception as e:  # noqa: BLE001
            raise self._translate(e, key, 0, write=True) from None

    async def update(self, slot: Slot, key: str, value: bytes, *, revision: int) -> int:
        """See :meth:`Coordination.update`."""
        if revision == 0:
            return await self.create(slot, key, value)
        kv = self._kv(slot)
        try:
            return int(await kv.update(key, value, last=revision))
        except Exception as e:  # noqa: BLE001
            raise self._translate(e, key, revision, write=True) from None

    async def put(self, slot: Slot, key: str, value: bytes) -> int:
        """See :meth:`Coordination.put`."""
        kv = self._kv(slot)
        try:
            return int(await kv.put(key, value))
        except Exception as e:  # noqa: BLE001
            raise self._translate(e, key, -1, write=True) from None

    async def delete(self, slot: Slot, key: str, *, revision: int | None = None) -> bool:
        """See :meth:`Coordination.delete`."""
        kv = self._kv(slot)
        if revision:
            # a delete at a revision lands only while the key is at it: it was present (no read)
            try:
                await kv.delete(key, last=revision)
            except Exception as e:  # noqa: BLE001
                raise self._translate(e, key, revision, write=True) from None
            return True
        present = await self.get(slot, key)
        if present is None and revision is None:
            return False
        try:
            await kv.delete(key, last=revision)
        except Exception as e:  # noqa: BLE001
            raise self._translate(e, key, revision or 0, write=True) from None
        return present is not None

    async def entries(self, slot: Slot, prefix: str = "") -> list[Entry]:
        """See :meth:`Coordination.entries`.

        Lists the bucket's live subjects from the stream's own state, then reads each key's last
        message from the stream leader. (nats-py's ``watch``-based listing can signal "no more
        entries" before the first one arrives; a listing that silently drops a live presence would
        make peers over-claim, FL-42.)
        """
        spec = self._buckets[slot][0]
        stream = f"KV_{spec.bucket}"
        pre = f"$KV.{spec.bucket}."
        try:
            info = await self._js.stream_info(stream, subjects_filter=f"{pre}>")
        except Exception as e:  # noqa: BLE001
            raise self._translate(e, f"{slot}/{prefix}*", 0, write=False) from None
        subjects = sorted(info.state.subjects or {})
        keys = [subj[len(pre) :] for subj in subjects if subj[len(pre) :].startswith(prefix)]
        found = await asyncio.gather(*(self.get(slot, k) for k in keys))
        return [e for e in found if e is not None]

    async def close(self) -> None:
        """Nothing to release: the connection belongs to the broker link."""
