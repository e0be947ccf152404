"""The keyring: AES-256-GCM keys by id, and the ``enc:v1`` envelope (CO-40, FL-151, FL-104, FL-107).

A sealed value is the text ``enc:v1:<key id>:<data>``, where ``<data>`` is the URL-safe base64 of
a 12-byte random nonce followed by the AES-GCM ciphertext and its 16-byte tag. The key id names
which key sealed it, so a fleet can rotate: add a new key, make it active, ``crewlet secrets
rekey``, then remove the old one (CO-40). The caller binds associated data (``aad``) to every
value; the secret store binds the secret's name (FL-151), so a value copied under another name
does not open.

Where the keys come from (:meth:`Keyring.for_node`): the node file's ``secrets`` block when it
lists keys. Without keys, a solo embedded node keeps a keyring it generated once in
``<store.dir>/keyring.json`` (mode 0600), and says so with a ``secrets_keyring_generated``
warning (CO-40: never silent). A node on a clustered or external stream has peers that must
open what it seals, so it never invents a key: it refuses to boot (:class:`KeyringMissing`).

Not guaranteed: a key's material is held in this process's memory for its life; nothing here
protects it from a reader of that memory or of the node file.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from shared import logs
from shared.config import NodeConfig

from ._errors import KeyringInvalid, KeyringMissing, Unopenable

__all__ = [
    "ENVELOPE_PREFIX",
    "KEY_BYTES",
    "KEYRING_FILE",
    "Keyring",
    "generate_key_material",
    "keyring_missing",
]

ENVELOPE_PREFIX = "enc:v1:"
"""Every sealed value starts with this (FL-104: ``enc:v1:<key id>:<ciphertext>``)."""
KEY_BYTES = 32
"""An AES-256 key, in bytes."""
NONCE_BYTES = 12
"""The AES-GCM nonce, in bytes (random per seal)."""
KEYRING_FILE = "keyring.json"
"""A solo node's generated keyring, under ``store.dir``."""
_KEY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # as the node file's rule (CO-40)
_log = logs.get("secrets")


def generate_key_material() -> str:
    """Return fresh key material: the standard base64 of 32 random bytes (44 characters).

    What ``crewlet secrets keygen`` prints and ``secrets.keys[].material`` takes.
    """
    return base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")


def _decode_material(material: str, where: str) -> bytes:
    try:
        raw = base64.b64decode(material.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise KeyringInvalid(
            f"{where}: the key material is not valid base64 (the value is not shown)"
        ) from None
    if len(raw) != KEY_BYTES:
        raise KeyringInvalid(
            f"{where}: the key material decodes to {len(raw)} bytes; an AES-256 key is {KEY_BYTES}"
        )
    return raw


class Keyring:
    """The AES-256-GCM keys this node can seal and open with, by id.

    Args:
        active_key_id: The key every :meth:`seal` uses.
        keys: Key id → the key's 32 raw bytes. Ids are letters, digits, ``.``, ``_``, ``-`` (no
            ``:``, the envelope's separator), at most 64 characters.

    Raises:
        KeyringInvalid: no keys, a key that is not 32 bytes, an id outside the grammar, or
            ``active_key_id`` not among ``keys``.
    """

    def __init__(self, active_key_id: str, keys: Mapping[str, bytes]) -> None:
        if not keys:
            raise KeyringInvalid("a keyring needs at least one key")
        for kid, key in keys.items():
            if not _KEY_ID.match(kid):
                raise KeyringInvalid(
                    f"{kid!r} is not a key id: letters, digits, '.', '_' or '-', at most 64 characters"
                )
            if len(key) != KEY_BYTES:
                raise KeyringInvalid(f"key {kid!r} is {len(key)} bytes; an AES-256 key is {KEY_BYTES}")
        if active_key_id not in keys:
            raise KeyringInvalid(
                f"active key {active_key_id!r} is not among the keys ({', '.join(sorted(keys))})"
            )
        self._active = active_key_id
        self._ciphers = {kid: AESGCM(bytes(key)) for kid, key in keys.items()}

    def __repr__(self) -> str:
        return f"Keyring(active_key_id={self._active!r}, key_ids={self.key_ids!r})"

    @property
    def active_key_id(self) -> str:
        """The id of the key new values are sealed under."""
        return self._active

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every key id this keyring can open, sorted."""
        return tuple(sorted(self._ciphers))

    @classmethod
    def for_node(cls, cfg: NodeConfig) -> Keyring:
        """Return the keyring of the node ``cfg`` describes (CO-40, FL-151).

        - ``secrets.keys`` given: those keys, sealing under ``secrets.active_key_id``.
        - No keys on a solo embedded node (not clustered, not a leaf, not ``stream.type: nats``):
          ``<store.dir>/keyring.json``, created once (mode 0600, the same shape as the node file's
          ``secrets`` block, so it can be copied there when the node grows into a fleet) with a
          ``secrets_keyring_generated`` warning naming the path (never the key).
        - No keys on a clustered or external stream: refused.

        Args:
            cfg: The validated node file.

        Returns:
            The keyring.

        Raises:
            KeyringMissing: no ``secrets.keys`` on a node whose peers must open what it seals.
            KeyringInvalid: a key's material is not base64 of 32 bytes, or ``keyring.json``
                exists but cannot be read as a keyring (the path is named).
        """
        sec = cfg.secrets
        if sec.keys:
            keys = {
                k.id: _decode_material(k.material, f"secrets.keys[{i}].material")
                for i, k in enumerate(sec.keys)
            }
            return cls(sec.active_key_id or sec.keys[0].id, keys)
        missing = keyring_missing(cfg)
        if missing:
            raise KeyringMissing(missing)
        return cls._local(cfg.store_dir / KEYRING_FILE)

    @classmethod
    def _local(cls, path: Path) -> Keyring:
        """Load ``path``, or create it once (exclusively: two racing creators keep the first)."""
        if not path.exists():
            kid = f"local-{secrets.token_hex(4)}"
            doc = {"active_key_id": kid, "keys": [{"id": kid, "material": generate_key_material()}]}
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(doc, f, indent=2)
                    f.write("\n")
                    f.flush()
                    os.fsync(f.fileno())
                # never replaces a keyring another process just wrote: that one is read below
                with contextlib.suppress(FileExistsError):
                    os.link(tmp, path)
                    _log.warning(
                        "secrets_keyring_generated",
                        path=str(path),
                        key_id=kid,
                        detail="no secrets.keys in the node file: a key was generated for this solo node; "
                        "copy this file's keys into secrets: of every node file before adding nodes "
                        "(CO-40)",
                    )
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise KeyringInvalid(
                f"{path}: not a readable keyring ({type(e).__name__}); restore it from backup"
            ) from None
        return cls._from_doc(doc, str(path))

    @classmethod
    def _from_doc(cls, doc: Any, where: str) -> Keyring:
        if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list) or not doc["keys"]:
            raise KeyringInvalid(f"{where}: expected {{active_key_id, keys: [{{id, material}}]}}")
        keys: dict[str, bytes] = {}
        for i, k in enumerate(doc["keys"]):
            if (
                not isinstance(k, dict)
                or not isinstance(k.get("id"), str)
                or not isinstance(k.get("material"), str)
            ):
                raise KeyringInvalid(f"{where}: keys[{i}] needs an id and a material")
            keys[k["id"]] = _decode_material(k["material"], f"{where}: keys[{i}].material")
        active = doc.get("active_key_id")
        if not isinstance(active, str) or not active:
            active = next(iter(keys))
        return cls(active, keys)

    @staticmethod
    def key_id_of(token: str) -> str | None:
        """Return the key id a sealed token names, or None when ``token`` is no ``enc:v1`` envelope."""
        if not token.startswith(ENVELOPE_PREFIX):
            return None
        kid, sep, _ = token[len(ENVELOPE_PREFIX) :].partition(":")
        return kid if sep and _KEY_ID.match(kid) else None

    def seal(self, plaintext: bytes, *, aad: bytes) -> str:
        """Seal ``plaintext`` under the active key.

        Args:
            plaintext: The bytes to protect.
            aad: Associated data bound to the ciphertext (the secret store passes the secret's
                name, FL-151); :meth:`open` must be given the same bytes.

        Returns:
            ``"enc:v1:<active key id>:<urlsafe base64 of 12-byte nonce + ciphertext + tag>"``.
        """
        nonce = secrets.token_bytes(NONCE_BYTES)
        data = self._ciphers[self._active].encrypt(nonce, plaintext, aad)
        return f"{ENVELOPE_PREFIX}{self._active}:{base64.urlsafe_b64encode(nonce + data).decode('ascii')}"

    def open(self, token: str, *, aad: bytes) -> bytes:
        """Open a token :meth:`seal` produced (on any node holding the same key).

        Args:
            token: The ``enc:v1:...`` text.
            aad: The associated data it was sealed with.

        Returns:
            The plaintext.

        Raises:
            Unopenable: ``token`` is not sealed at all; names a key id not in this keyring (add
                that key to ``secrets.keys``); or fails authentication (altered, other associated
                data, or different material under the same id). The message never holds the
                token or its plaintext.
        """
        if not token.startswith(ENVELOPE_PREFIX):
            raise Unopenable(
                "the value is not sealed (no enc:v1: envelope): store it again through `crewlet secrets "
                "set` (or `crewlet config seal` for a revision body)",
                reason="unsealed",
            )
        kid = self.key_id_of(token)
        body = token[len(ENVELOPE_PREFIX) :].partition(":")[2]
        if kid is None:
            raise Unopenable("the value's enc:v1 envelope is malformed (no key id)", reason="malformed")
        cipher = self._ciphers.get(kid)
        if cipher is None:
            raise Unopenable(
                f"sealed under key id {kid!r}, which is not in secrets.keys on this node "
                f"(it has {', '.join(self.key_ids)}): add that key to secrets.keys",
                reason="unknown_key",
                key_id=kid,
            )
        try:
            raw = base64.urlsafe_b64decode(body.encode("ascii"))
        except (binascii.Error, ValueError, UnicodeEncodeError):
            raise Unopenable(
                f"the value sealed under key id {kid!r} is malformed (not base64)",
                reason="malformed",
                key_id=kid,
            ) from None
        if len(raw) < NONCE_BYTES + 16:
            raise Unopenable(
                f"the value sealed under key id {kid!r} is malformed (too short)",
                reason="malformed",
                key_id=kid,
            )
        try:
            return cipher.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], aad)
        except InvalidTag:
            raise Unopenable(
                f"authentication failed under key id {kid!r}: the value was altered, was sealed with other "
                f"associated data (e.g. stored under another name), or key {kid!r} here is not the key that "
                "sealed it (every node needs the same material)",
                reason="authentication_failed",
                key_id=kid,
            ) from None


def keyring_missing(cfg: NodeConfig) -> str:
    """The :class:`KeyringMissing` refusal :meth:`Keyring.for_node` makes from the node file alone,
    or ``""``: a node without ``secrets.keys`` that shares its stream with other nodes (clustered,
    a leaf, or ``stream.type: nats``), whose peers must open what it seals (CO-40, FL-151).
    ``crewlet validate`` reports the same text (issue 35: validate and boot agree)."""
    if cfg.secrets.keys:
        return ""
    solo = cfg.stream.type == "embedded" and cfg.broker_kind == "member" and not cfg.clustered
    if solo:
        return ""
    return (
        "secrets.keys is empty, and this node shares its stream with other nodes, which must open "
        "what it seals: run `crewlet secrets keygen` once and give every node the same key "
        '(secrets: {active_key_id: k1, keys: [{id: k1, material: "${CREWLET_SECRETS_KEY}"}]})'
    )
