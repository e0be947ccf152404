"""Redaction and the structural diff of two company documents (CO-5, CO-27, CO-39).

:func:`redact` masks literal credentials: a value under a credential key (``api_keys``,
``secret``, ``token``, ``password``, and every value of ``headers``, ``env`` and ``mcp_env``) that
is not a ``${NAME}`` reference reads ``***``. References stay as written: they name a secret, they
are not one. Both sides of a diff are redacted before they are compared.

:func:`diff` walks both documents: mappings by key, lists of mappings by their identity (``handle``,
``id``, ``key`` or ``name``, when every item has one; else by index). Paths read like the
validator's: ``units[eng].roles[dev].goal``, ``providers.llm.default.model``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["MASK", "Change", "diff", "masked_credentials", "redact"]

MASK = "***"
_REF = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$")
_SECRET_KEYS = frozenset(
    {"api_key", "api_keys", "secret", "token", "password", "client_secret", "private_key"}
)
_SECRET_MAPS = frozenset({"headers", "env", "mcp_env"})
_IDENTITY = ("handle", "id", "key", "name")


def _mask(value: Any) -> Any:
    if isinstance(value, str):
        return value if not value or _REF.match(value) else MASK
    if isinstance(value, list):
        return [_mask(v) for v in value]
    if isinstance(value, dict):
        return {k: _mask(v) for k, v in value.items()}
    return value


def redact(document: Any) -> Any:
    """Return a copy of ``document`` with literal credentials masked as ``***`` (CO-5)."""
    if isinstance(document, dict):
        out: dict[str, Any] = {}
        for key, value in document.items():
            if key in _SECRET_KEYS:
                out[key] = _mask(value)
            elif key in _SECRET_MAPS and isinstance(value, dict):
                out[key] = {
                    k: _mask(v) if not isinstance(v, dict) else redact_map(v) for k, v in value.items()
                }
            else:
                out[key] = redact(value)
        return out
    if isinstance(document, list):
        return [redact(v) for v in document]
    return document


def redact_map(value: dict[str, Any]) -> dict[str, Any]:
    """Mask every leaf of a nested credential map (``mcp_env: {server: {VAR: value}}``)."""
    return {k: redact_map(v) if isinstance(v, dict) else _mask(v) for k, v in value.items()}


@dataclass(frozen=True)
class Change:
    """One difference between two documents.

    Attributes:
        path: Where, e.g. ``units[eng].roles[dev].goal``.
        op: ``added``, ``removed`` or ``changed``.
        before: The old value (None when added).
        after: The new value (None when removed).
    """

    path: str
    op: Literal["added", "removed", "changed"]
    before: Any = None
    after: Any = None

    def as_dict(self) -> dict[str, Any]:
        """The change as the API answers it."""
        return {"path": self.path, "op": self.op, "before": self.before, "after": self.after}


def _identity(before: list[Any], after: list[Any]) -> str | None:
    """The key identifying the items of both lists (unique strings within each), or None."""
    items = before + after
    if not items or not all(isinstance(i, dict) for i in items):
        return None
    for key in _IDENTITY:
        ok = True
        for side in (before, after):
            values = [i.get(key) for i in side]
            ok = ok and all(isinstance(v, str) for v in values) and len(set(values)) == len(values)
        if ok:
            return key
    return None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _shown(value: Any, secret: bool) -> Any:
    return _mask(value) if secret else redact(value)


def _walk(before: Any, after: Any, path: str, out: list[Change], secret: bool = False) -> None:
    """Compare the raw values; show them redacted (a changed credential reads ``*** -> ***``)."""
    if isinstance(before, dict) and isinstance(after, dict):
        for key in [*before, *(k for k in after if k not in before)]:
            where = _join(path, str(key))
            inner = secret or key in _SECRET_KEYS or key in _SECRET_MAPS
            if key not in after:
                out.append(Change(where, "removed", _shown(before[key], inner), None))
            elif key not in before:
                out.append(Change(where, "added", None, _shown(after[key], inner)))
            else:
                _walk(before[key], after[key], where, out, inner)
        return
    if isinstance(before, list) and isinstance(after, list):
        ident = _identity(before, after)
        if ident is not None:
            old = {i[ident]: i for i in before}
            new = {i[ident]: i for i in after}
            for key in [*old, *(k for k in new if k not in old)]:
                where = f"{path}[{key}]"
                if key not in new:
                    out.append(Change(where, "removed", _shown(old[key], secret), None))
                elif key not in old:
                    out.append(Change(where, "added", None, _shown(new[key], secret)))
                else:
                    _walk(old[key], new[key], where, out, secret)
            return
        for i in range(max(len(before), len(after))):
            where = f"{path}[{i}]"
            if i >= len(after):
                out.append(Change(where, "removed", _shown(before[i], secret), None))
            elif i >= len(before):
                out.append(Change(where, "added", None, _shown(after[i], secret)))
            else:
                _walk(before[i], after[i], where, out, secret)
        return
    if before != after:
        out.append(Change(path, "changed", _shown(before, secret), _shown(after, secret)))


def diff(before: dict[str, Any], after: dict[str, Any]) -> list[Change]:
    """The structural differences from ``before`` to ``after`` (CO-27).

    The raw documents are compared, so a changed literal credential is a change; every value shown
    is redacted (``***``).

    Returns:
        Changes in document order (``before``'s order, then keys only ``after`` has); empty when
        the documents are equal.
    """
    out: list[Change] = []
    _walk(before, after, "", out)
    return out


def masked_credentials(document: Any, path: str = "") -> list[str]:
    """Paths of credential values that are the mask ``***`` itself: an export sent back unchanged.

    Importing one would store ``***`` as the credential; the API refuses it by path instead.
    """
    out: list[str] = []
    if isinstance(document, dict):
        for key, value in document.items():
            where = _join(path, str(key))
            if (key in _SECRET_KEYS or key in _SECRET_MAPS) and MASK in json.dumps(value):
                out.append(where)
            elif isinstance(value, dict | list):
                out.extend(masked_credentials(value, where))
    elif isinstance(document, list):
        for i, value in enumerate(document):
            out.extend(masked_credentials(value, f"{path}[{i}]"))
    return out
