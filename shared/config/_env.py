"""``${NAME}`` and ``${NAME:-default}`` references: finding and resolving them (FL-9, CO-5).

Only the braced forms are references; ``NAME`` matches ``[A-Za-z_][A-Za-z0-9_]*``.

- ``${NAME}``: the variable's value (an empty value stays empty).
- ``${NAME:-default}``: the variable's value, or ``default`` when the variable is unset **or
  empty**, as in the shell and Docker Compose. ``default`` is literal text up to the closing ``}``
  (it may be empty and may not contain ``}``); it is not itself expanded. This lets one node file
  carry the compose fleet's values as defaults and be run elsewhere with other hosts, ports and
  dirs (FL-8, the compose rehearsal).

The node file (Tier A) is resolved when it loads, and an unset variable without a default is an
error naming the key (nothing starts half-configured). The company document (Tier B) keeps
references verbatim through validation and resolves them at apply time, where an unset one
without a default becomes ``""`` and is reported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["VAR_RE", "find_refs", "resolve_str", "resolve_tree"]

VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
"""Matches one ``${NAME}`` or ``${NAME:-default}`` reference; group 1 is the name, group 2 the
default (None for the plain form, ``""`` for ``${NAME:-}``)."""


def find_refs(text: str) -> list[str]:
    """Return the variable names referenced in ``text``, in order of appearance (defaults dropped).

    Example: ``find_refs("${A}:${B:-80}")`` → ``["A", "B"]``.
    """
    return [m.group(1) for m in VAR_RE.finditer(text)]


def resolve_str(text: str, env: Mapping[str, str], on_unset: Callable[[str], str]) -> str:
    """Return ``text`` with every reference replaced from ``env``.

    Args:
        text: Any string; text outside references is kept as is.
        env: Where names are looked up.
        on_unset: Called as ``on_unset(name)`` for a plain ``${NAME}`` that ``env`` lacks; its
            return value is substituted. Never called for ``${NAME:-default}``, whose default
            stands in when the name is unset or empty.

    Returns:
        The resolved string, e.g. ``"${HOST:-s3}:${PORT:-8333}"`` with ``{"PORT": "9000"}`` →
        ``"s3:9000"``.
    """

    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if default is not None:
            value = env.get(name, "")
            return value if value != "" else default
        if name in env:
            return env[name]
        return on_unset(name)

    return VAR_RE.sub(sub, text)


def resolve_tree(
    data: Any,
    env: Mapping[str, str],
    *,
    on_unset: Callable[[str, str], str],
    path: str = "",
) -> Any:
    """Return a copy of ``data`` with every reference in its strings replaced from ``env``.

    Args:
        data: Plain YAML data (dicts, lists, scalars). Only strings are resolved: a value that
            must be a number (a port) may be written ``"${PORT:-8080}"`` and is coerced by the
            schema that validates the result.
        env: Where names are looked up (usually ``os.environ``).
        on_unset: Called as ``on_unset(path, name)`` for each plain ``${NAME}`` ``env`` lacks;
            its return value is substituted (it may record an issue and return ``""``). A
            ``${NAME:-default}`` never calls it.
        path: The dotted path of ``data`` inside its document (for ``on_unset``).

    Returns:
        The resolved copy; ``data`` itself is not modified.
    """
    if isinstance(data, str):
        return resolve_str(data, env, lambda name: on_unset(path, name))
    if isinstance(data, dict):
        return {
            k: resolve_tree(v, env, on_unset=on_unset, path=f"{path}.{k}" if path else str(k))
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [resolve_tree(v, env, on_unset=on_unset, path=f"{path}[{i}]") for i, v in enumerate(data)]
    return data
