"""The control plane's records: a company revision and the activation pointer (CO-4, FL-104).

A **revision** is an immutable company document with its origin. Every revision is kept in the
fleet's history, the ``revisions`` coordination slot (bucket ``crewlet_revisions``, no age), one
key per revision id, its body sealed under the Tier A keyring with the revision id as associated
data, so a body copied under another id does not open (FL-107).

The **activation pointer** is the key ``activation`` in the ``config`` slot (``crewlet_config``, no
age). One record carries the pointer (``revision_id``), the sealed body of the current revision
(``payload``: ``{"__encrypted__": "enc:v1:<key id>:<ciphertext>"}``), its origin and the activation
instant ``activated_at`` (milliseconds since the epoch, FL-105). The **epoch** is the KV revision of
that key: append and flip in one write, so two activations always get two epochs (FL-104).

Choice (ours): the spec keeps history in each node's own table and only the current body on the KV;
here history is fleet-wide on the KV too, so ``crewlet config activate ID`` and ``config diff`` work
through any node. What FL-106 asks still holds: a revision is stored first and becomes active
only when the pointer moves to it; a lost compare-and-set leaves it in history only.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from ._errors import PayloadUnopenable

__all__ = [
    "ACTIVATION_KEY",
    "Activation",
    "CreatedByKind",
    "Revision",
    "Sealer",
    "Source",
    "digest_of",
    "new_revision_id",
    "now_iso",
    "seed_revision_id",
]

ACTIVATION_KEY = "activation"
"""The pointer's key in the ``config`` slot (FL-104)."""

CreatedByKind = Literal["agent", "human", "operator", "system"]
Source = Literal["cli", "api", "seed", "offline", "import"]
_ENCRYPTED = "__encrypted__"


class Sealer(Protocol):
    """The keyring as the control plane uses it (:class:`shared.secrets.Keyring`, FL-107)."""

    def seal(self, plaintext: bytes, *, aad: bytes) -> str:
        """Return ``enc:v1:<key id>:<ciphertext>`` of ``plaintext`` under the active key."""
        ...

    def open(self, token: str, *, aad: bytes) -> bytes:
        """Return the plaintext of ``token``; raise when it does not open."""
        ...


def now_iso() -> str:
    """The current UTC instant as ISO-8601 with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _canonical(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest_of(document: dict[str, Any]) -> str:
    """SHA-256 hex of the document's canonical JSON (sorted keys): equal documents, equal digests."""
    return hashlib.sha256(_canonical(document)).hexdigest()


def new_revision_id() -> str:
    """A fresh, sortable, typeable revision id: ``r-<yyyymmdd>-<hhmmss>-<4 hex>`` (UTC)."""
    return f"r-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(2)}"


def seed_revision_id(document: dict[str, Any]) -> str:
    """The id of a seeded revision: ``seed-<12 hex of its digest>``.

    Derived from the content, so nodes booting together with one seed file write one revision
    rather than one each (FL-109).
    """
    return f"seed-{digest_of(document)[:12]}"


def _seal(sealer: Sealer, revision_id: str, document: dict[str, Any]) -> dict[str, str]:
    return {_ENCRYPTED: sealer.seal(_canonical(document), aad=revision_id.encode())}


def _open(sealer: Sealer, revision_id: str, payload: Any) -> dict[str, Any]:
    """Open a sealed body (FL-107); raise :class:`PayloadUnopenable` naming the remedy."""
    if not isinstance(payload, dict) or not isinstance(payload.get(_ENCRYPTED), str):
        raise PayloadUnopenable(
            f"revision {revision_id}: the stored body is not sealed; re-import it through "
            "`crewlet config import` (which seals it under the fleet's keyring)"
        )
    try:
        plain = sealer.open(payload[_ENCRYPTED], aad=revision_id.encode())
    except Exception as e:  # noqa: BLE001 - the keyring's own error names key id and remedy
        raise PayloadUnopenable(f"revision {revision_id}: {e}") from None
    try:
        document = json.loads(plain)
    except ValueError:
        raise PayloadUnopenable(f"revision {revision_id}: the opened body is not JSON") from None
    if not isinstance(document, dict):
        raise PayloadUnopenable(f"revision {revision_id}: the opened body is not a JSON object")
    return document


@dataclass(frozen=True)
class Revision:
    """One immutable company revision with its origin (CO-4, FL-104).

    Attributes:
        revision_id: ``r-<date>-<time>-<hex>`` (or ``seed-<digest>`` for a seed).
        document: The company document as written (``${NAME}`` references verbatim).
        summary: What changed, in the author's words (``X-Summary``).
        source: ``cli``, ``api``, ``seed`` (a node's ``--company`` file), ``offline`` or ``import``.
        created_by: The author (a token id, a node id, ...); ``"not recorded"`` when unknown.
        created_by_kind: ``agent``, ``human``, ``operator`` or ``system``.
        operator_id: The credential that wrote it (the API token id), or ``""``.
        created_at: ISO-8601 UTC.
        parent_revision_id: The revision active when this one was written, or None.
        digest: SHA-256 of the document's canonical JSON.
        compat: Imported with ``--compat`` (CO-43): the node applies it with the compatibility rules
            too (a document without an LLM provider runs with its seats stopped).
    """

    revision_id: str
    document: dict[str, Any]
    summary: str = ""
    source: Source = "api"
    created_by: str = "not recorded"
    created_by_kind: CreatedByKind = "operator"
    operator_id: str = ""
    created_at: str = field(default_factory=now_iso)
    parent_revision_id: str | None = None
    digest: str = ""
    compat: bool = False

    def __post_init__(self) -> None:
        if not self.digest:
            object.__setattr__(self, "digest", digest_of(self.document))

    def meta(self) -> dict[str, Any]:
        """Every field but the document (what lists and the API show about a revision)."""
        out = asdict(self)
        out.pop("document")
        return out

    def encode(self, sealer: Sealer) -> bytes:
        """The history record: the meta plus the sealed body (bytes of JSON)."""
        return json.dumps({**self.meta(), "payload": _seal(sealer, self.revision_id, self.document)}).encode()

    @classmethod
    def decode(cls, raw: bytes, sealer: Sealer | None) -> Revision:
        """Read a history record; with ``sealer`` None the document is left empty (meta only).

        Raises:
            PayloadUnopenable: the body is unsealed or does not open (FL-107).
            ValueError: the record is not a revision record.
        """
        data = json.loads(raw)
        if not isinstance(data, dict) or not isinstance(data.get("revision_id"), str):
            raise ValueError("not a revision record")
        document = _open(sealer, data["revision_id"], data.get("payload")) if sealer is not None else {}
        return cls.from_meta(data, document)

    @classmethod
    def from_meta(cls, data: dict[str, Any], document: dict[str, Any]) -> Revision:
        """A revision from its :meth:`meta` fields and its (opened) document.

        Raises:
            KeyError: ``revision_id`` is missing.
        """
        return cls(
            revision_id=str(data["revision_id"]),
            document=document,
            summary=str(data.get("summary", "")),
            source=data.get("source", "api"),
            created_by=str(data.get("created_by") or "not recorded"),
            created_by_kind=data.get("created_by_kind", "operator"),
            operator_id=str(data.get("operator_id", "")),
            created_at=str(data.get("created_at", "")),
            parent_revision_id=data.get("parent_revision_id"),
            digest=str(data.get("digest") or "") or (digest_of(document) if document else "-"),
            compat=bool(data.get("compat", False)),
        )


@dataclass(frozen=True)
class Activation:
    """The activation pointer as read (FL-104, FL-105).

    Attributes:
        revision: The active revision (its document opened).
        epoch: The KV revision of the pointer key: the fleet's config epoch.
        activated_at: The activation instant, milliseconds since the Unix epoch; strictly rising.
        activated_by: Who moved the pointer (a token id or a node id).
    """

    revision: Revision
    epoch: int
    activated_at: int
    activated_by: str = ""

    @property
    def activated_at_iso(self) -> str:
        """``activated_at`` as ISO-8601 UTC."""
        return datetime.fromtimestamp(self.activated_at / 1000, UTC).isoformat(timespec="milliseconds")

    @staticmethod
    def encode(revision: Revision, sealer: Sealer, *, activated_at: int, activated_by: str) -> bytes:
        """The pointer record for ``revision`` activated at ``activated_at`` ms (bytes of JSON)."""
        return json.dumps(
            {
                **revision.meta(),
                "payload": _seal(sealer, revision.revision_id, revision.document),
                "activated_at": activated_at,
                "activated_by": activated_by,
            }
        ).encode()

    @staticmethod
    def peek(raw: bytes) -> tuple[str, int]:
        """``(revision_id, activated_at)`` of a pointer record without opening its body.

        Raises:
            ValueError: not a pointer record.
        """
        data = json.loads(raw)
        if not isinstance(data, dict) or not isinstance(data.get("revision_id"), str):
            raise ValueError("not an activation record")
        return data["revision_id"], int(data.get("activated_at") or 0)

    @classmethod
    def decode(cls, raw: bytes, epoch: int, sealer: Sealer) -> Activation:
        """Read the pointer record stored at KV revision ``epoch``.

        Raises:
            PayloadUnopenable: the body is unsealed, not an object, or does not open (FL-107).
        """
        try:
            revision = Revision.decode(raw, sealer)
            data = json.loads(raw)
        except ValueError as e:
            raise PayloadUnopenable(f"the activation pointer is unreadable: {e}") from None
        return cls(
            revision=revision,
            epoch=epoch,
            activated_at=int(data.get("activated_at") or 0),
            activated_by=str(data.get("activated_by", "")),
        )
