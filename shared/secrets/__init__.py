"""Secrets seam: the Tier A keyring and the company's secret store (CO-40, FL-151, FL-107).

:class:`Keyring` seals and opens ``enc:v1:<key id>:...`` envelopes with AES-256-GCM (the
``cryptography`` package); :meth:`Keyring.for_node` builds it from the node file's ``secrets``
block. :class:`SecretStore` keeps company credentials on the coordination KV (slot ``secrets``),
each sealed with its own name as associated data. No value ever appears in a log line, an error
message or a listing; :func:`secret_values` gives the turn engine what to redact.
"""

from ._errors import (
    InvalidSecretName,
    KeyringInvalid,
    KeyringMissing,
    SecretsError,
    SecretTooLarge,
    Unopenable,
    UnopenableReason,
)
from ._keyring import (
    ENVELOPE_PREFIX,
    KEY_BYTES,
    KEYRING_FILE,
    Keyring,
    generate_key_material,
    keyring_missing,
)
from ._names import MAX_NAME_CHARS, NAME_PATTERN, validate_name
from ._store import MAX_VALUE_BYTES, RekeyReport, SecretInfo, SecretStore, secret_values

__all__ = [
    "ENVELOPE_PREFIX",
    "KEYRING_FILE",
    "KEY_BYTES",
    "MAX_NAME_CHARS",
    "MAX_VALUE_BYTES",
    "NAME_PATTERN",
    "InvalidSecretName",
    "Keyring",
    "KeyringInvalid",
    "KeyringMissing",
    "RekeyReport",
    "SecretInfo",
    "SecretStore",
    "SecretTooLarge",
    "SecretsError",
    "Unopenable",
    "UnopenableReason",
    "generate_key_material",
    "keyring_missing",
    "secret_values",
    "validate_name",
]
