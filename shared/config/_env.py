"""``${NAME}`` references: finding and resolving them (FL-9, CO-5).

Only the braced form is a reference; ``NAME`` matches ``[A-Za-z_][A-Za-z0-9_]*``. The node file
(Tier A) is resolved when it loads, and an unset variable there is an error naming the key
(nothing starts half-configured). The company document (Tier B) keeps references verbatim through
validation and resolves them at apply time, where an unset one becomes ``""`` and is reported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["VAR_RE", "find_refs", "resolve_tree"]

VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""Matches one ``${NAME}`` reference; group 1 is the name."""


def find_refs(text: str) -> list[str]:
    """Return the variable names referenced in ``text``, in order of appearance."""
    return VAR_RE.findall(text)


def resolve_tree(
    data: Any,
    env: Mapping[str, str],
    *,
    on_unset: Callable[[str, str], str],
    path: str = "",
) -> Any:
    """Return a copy of ``data`` with every ``${NAME}`` in its strings replaced from ``env``.

    Args:
        data: Plain YAML data (dicts, lists, scalars).
        env: Where names are looked up (usually ``os.environ``).
        on_unset: Called as ``on_unset(path, name)`` for each reference ``env`` lacks; its return
            value is substituted (it may record an issue and return ``""``).
        path: The dotted path of ``data`` inside its document (for ``on_unset``).

    Returns:
        The resolved copy; ``data`` itself is not modified.
    """
    if isinstance(data, str):

        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            if name in env:
                return env[name]
            return on_unset(path, name)

        return VAR_RE.sub(sub, data)
    if isinstance(data, dict):
        return {
            k: resolve_tree(v, env, on_unset=on_unset, path=f"{path}.{k}" if path else str(k))
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [resolve_tree(v, env, on_unset=on_unset, path=f"{path}[{i}]") for i, v in enumerate(data)]
    return data
