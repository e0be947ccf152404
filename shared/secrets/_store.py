"""The secret store: company credentials on the coordination KV, sealed per name (FL-151, CO-40).

Slot ``secrets`` (bucket ``crewlet_secrets``, no age). Each key is a secret's name; each value is
the JSON record ``{"sealed", "key_id", "updated_at", "updated_by"}``, where ``sealed`` is the
value sealed under the keyring's active key with the name (UTF-8) as associated data, so a record
copied under another name does not open. Every node of a fleet reads the same bucket and holds
the same keys, so a value set through one node resolves on all of them (FL-151); nodes re-read
the store on every activation epoch (FL-115), not on every write.

Values never leave this module except through :meth:`SecretStore.reveal` and
:meth:`SecretStore.resolve`; listings carry names and metadata only, and log lines carry names
and key ids only.

Not guaranteed: two concurrent :meth:`SecretStore.set` calls of one name are last-write-wins (the
KV's order). :meth:`SecretStore.rekey` uses compare-and-set per record, so it never overwrites a
value set while it runs.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from shared import logs
from shared.coordination import Coordination, Entry, RevisionConflict, Slot

from ._errors import SecretTooLarge, Unopenable
from ._keyring import Keyring
from ._names import validate_name

__all__ = ["MAX_VALUE_BYTES", "RekeyReport", "SecretInfo", "SecretStore", "secret_values"]

MAX_VALUE_BYTES = 64 * 1024
"""The largest secret value, in UTF-8 bytes (64 KiB; ours: a credential, a PEM key or a service
account JSON fits, and the sealed record stays far below the broker's payload limit)."""
SLOT: Slot = "secrets"
_REKEY_ATTEMPTS = 3
_log = logs.get("secrets")


@dataclass(frozen=True)
class SecretInfo:
    """What may be said about a secret without its value.

    Attributes:
        name: The secret's name.
        key_id: The id of the key its value is sealed under (``""`` when the record is unreadable).
        updated_at: When it was last set, an ISO-8601 UTC instant (``""`` when unknown).
        updated_by: Who set it (e.g. ``operator:<token id>``), ``""`` when not recorded.
    """

    name: str
    key_id: str
    updated_at: str
    updated_by: str


@dataclass
class RekeyReport:
    """The outcome of :meth:`SecretStore.rekey_report`.

    Attributes:
        resealed: Names re-sealed under the active key.
        current: Names already under the active key (left as they were).
        unopenable: Names whose value did not open; kept unchanged, never dropped.
    """

    resealed: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)
    unopenable: list[str] = field(default_factory=list)


def secret_values(resolved: Mapping[str, str]) -> list[str]:
    """Return the values of ``resolved`` to redact from recorded prompts, logs and spans.

    Args:
        resolved: Name → value, as :meth:`SecretStore.resolve` returns.

    Returns:
        The distinct non-empty values, longest first (so a value that contains another is redacted
        whole).
    """
    return sorted({v for v in resolved.values() if v}, key=lambda v: (-len(v), v))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _record(entry: Entry) -> dict[str, str] | None:
    try:
        doc = json.loads(entry.value)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("sealed"), str):
        return None
    return {k: str(v) for k, v in doc.items() if isinstance(v, str)}


class SecretStore:
    """Company secrets on the coordination KV, each sealed under the keyring (FL-151, CO-40).

    Args:
        coord: The node's coordination store (its ``secrets`` slot).
        keyring: The node's keyring (:meth:`Keyring.for_node`).

    Every method may raise :class:`~shared.coordination.CoordinationUnavailable` (the store could
    not be asked; retrying later is safe; a write may have landed: an
    :class:`~shared.coordination.OutcomeUnknown` write is best repeated).
    """

    def __init__(self, coord: Coordination, keyring: Keyring) -> None:
        self._coord = coord
        self._keyring = keyring

    @property
    def keyring(self) -> Keyring:
        """The keyring values are sealed and opened with."""
        return self._keyring

    def _seal(self, name: str, value: str, by: str, *, updated_at: str = "") -> bytes:
        doc = {
            "sealed": self._keyring.seal(value.encode("utf-8"), aad=name.encode("utf-8")),
            "key_id": self._keyring.active_key_id,
            "updated_at": updated_at or _now(),
            "updated_by": by,
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    def _open(self, name: str, entry: Entry) -> str:
        rec = _record(entry)
        if rec is None:
            raise Unopenable(
                f"secret {name}: the stored record is not a sealed secret record", reason="malformed"
            )
        return self._keyring.open(rec["sealed"], aad=name.encode("utf-8")).decode("utf-8")

    async def set(self, name: str, value: str, *, by: str = "") -> None:
        """Seal ``value`` under the active key and store it as ``name`` (last write wins).

        Args:
            name: The secret's name (:data:`~shared.secrets.NAME_PATTERN`).
            value: The value; at most :data:`MAX_VALUE_BYTES` bytes of UTF-8. ``""`` is allowed
                (it resolves like an unset reference).
            by: Who sets it, recorded as ``updated_by`` (e.g. ``operator:<token id>``).

        Raises:
            InvalidSecretName: ``name`` is not a secret name.
            SecretTooLarge: ``value`` is over the limit.
            CoordinationUnavailable: the store could not be asked (``OutcomeUnknown``: repeat it).
        """
        validate_name(name)
        size = len(value.encode("utf-8"))
        if size > MAX_VALUE_BYTES:
            raise SecretTooLarge(name, size, MAX_VALUE_BYTES)
        await self._coord.put(SLOT, name, self._seal(name, value, by))
        _log.info("secret_set", name=name, key_id=self._keyring.active_key_id, by=by)

    async def unset(self, name: str) -> bool:
        """Delete ``name``; True when it was present.

        Raises:
            InvalidSecretName: ``name`` is not a secret name.
            CoordinationUnavailable: the store could not be asked.
        """
        validate_name(name)
        present = await self._coord.delete(SLOT, name)
        if present:
            _log.info("secret_unset", name=name)
        return present

    async def info(self, name: str) -> SecretInfo | None:
        """Return ``name``'s metadata (never its value), or None when it is not set.

        Raises:
            InvalidSecretName: ``name`` is not a secret name.
            CoordinationUnavailable: the store could not be asked.
        """
        validate_name(name)
        entry = await self._coord.get(SLOT, name)
        return None if entry is None else _info(entry)

    async def list(self) -> list[SecretInfo]:
        """Return every secret's metadata in name order; never a value.

        Raises:
            CoordinationUnavailable: the store could not be asked.
        """
        return [_info(e) for e in await self._coord.entries(SLOT)]

    async def reveal(self, name: str) -> str | None:
        """Return ``name``'s value, or None when it is not set.

        Raises:
            InvalidSecretName: ``name`` is not a secret name.
            Unopenable: the value does not open on this node (the remedy is in the message).
            CoordinationUnavailable: the store could not be asked.
        """
        validate_name(name)
        entry = await self._coord.get(SLOT, name)
        return None if entry is None else self._open(name, entry)

    async def resolve(self) -> tuple[dict[str, str], builtins.list[str]]:
        """Open every secret: what a company apply resolves ``${NAME}`` from first (FL-151, CO-5).

        A value that does not open is left out, logged ``secret_unopenable`` (name, key id and
        reason only) and named in the second list, so the apply can report it; a reference to it
        then falls through to the environment.

        Returns:
            ``(values, unopenable)``: name → value for every secret that opened, and the names that
            did not, sorted.

        Raises:
            CoordinationUnavailable: the store could not be asked.
        """
        values: dict[str, str] = {}
        failed: list[str] = []
        for entry in await self._coord.entries(SLOT):
            try:
                values[entry.key] = self._open(entry.key, entry)
            except (Unopenable, UnicodeDecodeError) as e:
                failed.append(entry.key)
                _log.warning(
                    "secret_unopenable",
                    name=entry.key,
                    key_id=getattr(e, "key_id", None),
                    reason=getattr(e, "reason", "not_utf8"),
                )
        return values, sorted(failed)

    async def rekey(self) -> int:
        """Re-seal every value under the active key; return how many were re-sealed (CO-40).

        After it, a key that is no longer active can be removed from ``secrets.keys`` on every node
        once no value names it (:meth:`list` shows each value's key id). See :meth:`rekey_report`.

        Raises:
            CoordinationUnavailable: the store could not be asked; the records done so far stay done.
        """
        return len((await self.rekey_report()).resealed)

    async def rekey_report(self) -> RekeyReport:
        """Re-seal every value not yet under the active key, by compare-and-set per record.

        A record set by someone else meanwhile is re-read (it is usually already current). A
        value that does not open is logged ``secret_unopenable``, left as it is and reported.

        Returns:
            What was re-sealed, already current, or unopenable.

        Raises:
            CoordinationUnavailable: the store could not be asked; the records done so far stay done.
        """
        report = RekeyReport()
        active = self._keyring.active_key_id
        for listed in await self._coord.entries(SLOT):
            entry: Entry | None = listed
            for _ in range(_REKEY_ATTEMPTS):
                if entry is None:  # deleted meanwhile
                    break
                name = entry.key
                rec = _record(entry)
                if rec is not None and Keyring.key_id_of(rec["sealed"]) == active:
                    report.current.append(name)
                    break
                try:
                    value = self._open(name, entry)
                except (Unopenable, UnicodeDecodeError) as e:
                    report.unopenable.append(name)
                    _log.warning(
                        "secret_unopenable",
                        name=name,
                        key_id=getattr(e, "key_id", None),
                        reason=getattr(e, "reason", "not_utf8"),
                    )
                    break
                old = rec or {}  # the value is unchanged: keep who set it and when
                sealed = self._seal(
                    name, value, old.get("updated_by", ""), updated_at=old.get("updated_at", "")
                )
                try:
                    await self._coord.update(SLOT, name, sealed, revision=entry.revision)
                except RevisionConflict:
                    entry = await self._coord.get(SLOT, name)
                    continue
                report.resealed.append(name)
                break
            else:
                _log.warning("secret_rekey_contended", name=listed.key, attempts=_REKEY_ATTEMPTS)
        _log.info(
            "secrets_rekeyed",
            active_key_id=active,
            resealed=len(report.resealed),
            current=len(report.current),
            unopenable=report.unopenable,
        )
        return report


def _info(entry: Entry) -> SecretInfo:
    rec = _record(entry) or {}
    kid = Keyring.key_id_of(rec.get("sealed", "")) or rec.get("key_id", "")  # the envelope is the truth
    return SecretInfo(entry.key, kid, rec.get("updated_at", ""), rec.get("updated_by", ""))
