"""The Tier A refusals about the node file's keyring, ``secrets`` (CO-40, FL-151).

A key id outside the grammar; material that is not base64 of exactly 32 bytes; duplicate key
ids; ``active_key_id`` naming no listed key; several keys with no ``active_key_id``;
``active_key_id`` with no keys. Each refusal names its path, never a key's material.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from ._issues import Issue

__all__ = ["KEY_BYTES", "KEY_ID_RE", "check_keyring"]

KEY_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""Keyring key id grammar (CO-40): it is written into every envelope, so never ``:``."""
KEY_BYTES = 32
"""An AES-256 key's length in bytes (CO-40: material is base64 of 32 bytes)."""


def _material_problem(material: str) -> str | None:
    """Why ``material`` is not base64 of exactly :data:`KEY_BYTES` bytes, or None. Never echoes it."""
    if not material:
        return "is empty: give base64 of 32 random bytes (`crewlet secrets keygen` prints one)"
    try:
        raw = base64.b64decode(material.strip(), validate=True)
    except (binascii.Error, ValueError):
        return (
            "is not valid base64 (the value is not shown): give base64 of 32 random bytes "
            "(`crewlet secrets keygen` prints one)"
        )
    if len(raw) != KEY_BYTES:
        return (
            f"decodes to {len(raw)} bytes; an AES-256 key is exactly {KEY_BYTES} bytes "
            "(`crewlet secrets keygen` prints one)"
        )
    return None


def check_keyring(secrets: Any, file: str) -> list[Issue]:
    """The keyring refusals (CO-40, FL-151) of the raw ``secrets`` block; each names its path, never a
    key's material.

    Args:
        secrets: The resolved raw ``secrets`` block (anything: a non-mapping is left to the shape check).
        file: The file name for the issues.

    Returns:
        The issues found, in document order.
    """
    out: list[Issue] = []
    if not isinstance(secrets, dict):
        return out
    keys = secrets.get("keys") or []
    if not isinstance(keys, list):
        return out
    ids: list[str] = []
    for i, key in enumerate(keys):
        if not isinstance(key, dict):
            continue
        kid = key.get("id")
        if isinstance(kid, str) and kid:
            if not KEY_ID_RE.match(kid):
                out.append(
                    Issue(
                        file,
                        f"secrets.keys[{i}].id",
                        "invalid",
                        f"{kid!r} is not a key id: start with a letter or digit, then letters, digits, "
                        "'.', '_' or '-', at most 64 characters",
                    )
                )
            elif kid in ids:
                out.append(Issue(file, f"secrets.keys[{i}].id", "conflict", f"key id {kid!r} is used twice"))
            ids.append(kid)
        material = key.get("material")
        if isinstance(material, str) and "${" not in material:
            problem = _material_problem(material)
            if problem:
                out.append(
                    Issue(file, f"secrets.keys[{i}].material", "invalid", f"the key material {problem}")
                )
    active = secrets.get("active_key_id")
    if isinstance(active, str) and active:
        if not keys:
            out.append(
                Issue(
                    file,
                    "secrets.active_key_id",
                    "conflict",
                    f"names key {active!r} but secrets.keys is empty: list the key "
                    '(e.g. {id: k1, material: "${CREWLET_SECRETS_KEY}"})',
                )
            )
        elif active not in ids:
            out.append(
                Issue(
                    file,
                    "secrets.active_key_id",
                    "unknown_value",
                    f"{active!r} is not among secrets.keys ({', '.join(repr(k) for k in ids) or 'none'})",
                )
            )
    elif len(keys) > 1:
        out.append(
            Issue(
                file,
                "secrets.active_key_id",
                "missing",
                "several keys are listed: set secrets.active_key_id to the one new values are sealed under",
            )
        )
    return out
