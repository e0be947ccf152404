"""Errors of the secrets seam (CO-40, FL-151, FL-107).

::

    CrewletError
    └── SecretsError                 base of the seam
        ├── KeyringMissing           a fleet node has no ``secrets.keys`` (also UsageError)
        ├── KeyringInvalid           a keyring that cannot be used: bad material, unknown active id,
        │                            an unreadable keyring file (also UsageError, ValueError)
        ├── InvalidSecretName        a name outside :data:`NAME_PATTERN` (also UsageError, ValueError)
        ├── SecretTooLarge           a value over :data:`MAX_VALUE_BYTES` (also UsageError, ValueError)
        └── Unopenable               a sealed token did not open: not sealed, sealed under a key this
                                     node lacks, or authentication failed (never retryable)

No message ever carries a secret value or key material: a name, a key id and a remedy at most.
Coordination failures are not wrapped: :class:`~shared.coordination.CoordinationUnavailable`
propagates from :class:`~shared.secrets.SecretStore` unchanged (retry later; the answer is unknown).
"""

from __future__ import annotations

from typing import Literal

from shared.errors import CrewletError, UsageError

__all__ = [
    "InvalidSecretName",
    "KeyringInvalid",
    "KeyringMissing",
    "SecretTooLarge",
    "SecretsError",
    "Unopenable",
    "UnopenableReason",
]


class SecretsError(CrewletError):
    """Base of every secrets failure."""

    retryable = False


class KeyringMissing(SecretsError, UsageError):
    """A node on a clustered or external stream has no ``secrets.keys`` (CO-40, FL-151).

    Every node of a fleet must hold the same keys, so none may invent its own: the boot is refused
    (exit 2) with the way out in the message.
    """

    retryable = False


class KeyringInvalid(SecretsError, UsageError, ValueError):
    """A keyring that cannot be used: key material that is not 32 bytes, an active key id that is
    not among the keys, a key id with ``:``, or a local keyring file that cannot be read."""

    retryable = False


class InvalidSecretName(SecretsError, UsageError, ValueError):
    """A secret name outside :data:`~shared.secrets.NAME_PATTERN` or longer than
    :data:`~shared.secrets.MAX_NAME_CHARS`.

    Attributes:
        name: The name refused (names are not secret).
    """

    retryable = False

    def __init__(self, name: str, message: str) -> None:
        self.name = name
        super().__init__(message)


class SecretTooLarge(SecretsError, UsageError, ValueError):
    """A value over :data:`~shared.secrets.MAX_VALUE_BYTES` (UTF-8 bytes) was refused.

    Attributes:
        name: The secret's name.
        size: The value's size in bytes.
        limit: The limit in bytes.
    """

    retryable = False

    def __init__(self, name: str, size: int, limit: int) -> None:
        self.name = name
        self.size = size
        self.limit = limit
        super().__init__(f"secret {name}: the value is {size} bytes; the limit is {limit} bytes")


UnopenableReason = Literal["unsealed", "malformed", "unknown_key", "authentication_failed"]
"""Why a token did not open: not an ``enc:v1:`` envelope at all; an envelope that does not parse;
sealed under a key id this node does not hold; the key or the associated data did not match."""


class Unopenable(SecretsError):
    """A sealed token did not open on this node (FL-107). Never carries the token or its plaintext.

    Attributes:
        reason: One of :data:`UnopenableReason`.
        key_id: The envelope's key id, or None when there is none (unsealed or malformed).
    """

    retryable = False

    def __init__(self, message: str, *, reason: UnopenableReason, key_id: str | None = None) -> None:
        self.reason: UnopenableReason = reason
        self.key_id = key_id
        super().__init__(message)
